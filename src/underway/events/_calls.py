"""Calls: a tool call's intent and outcome, model responses, retries, and what the guard
decided (refusals, policy, budgets, shadow mode)."""

from __future__ import annotations

from typing import Literal

from ._base import JSON, Event
from ._lean import Millis


class CallEvent(Event):
    """Base of the events about one tool call: which call it is."""

    type: str
    """The event's type name (each event type fixes it)."""
    key: str
    """The call's idempotency key."""
    tool: str
    index: int
    """The call's place among its step's calls."""


class HashedCallEvent(CallEvent):
    """Base of the call events that name the hash of the call's arguments."""

    args_hash: str


class ToolStarted(CallEvent):
    """Write-ahead intent: a mutating call is about to run with this idempotency key."""

    type: Literal["ToolStarted"] = "ToolStarted"
    args: JSON
    args_hash: str
    sandbox_profile: str | None = None
    policy_decision: str | None = None
    sensitive_fields: list[str] | None = None
    """The fields of the tool's arguments and result it declares sensitive
    (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """The fields of its argument and result models typed as secrets."""


class ToolSucceeded(HashedCallEvent):
    """A call's result."""

    type: Literal["ToolSucceeded"] = "ToolSucceeded"
    result: JSON
    latency_ms: Millis = 0.0
    reconciled: bool = False
    """True when the result came from the tool's reconcile hook, not from running it."""
    counts: dict[str, float] | None = None
    """What the call counts against budgets: ``messages`` and ``money.<CURRENCY>``."""
    sensitive_fields: list[str] | None = None
    """The fields of the tool's arguments and result it declares sensitive
    (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """The fields of its argument and result models typed as secrets."""


class ToolFailed(HashedCallEvent):
    """A call raised; ``retryable`` is the tool's own verdict."""

    type: Literal["ToolFailed"] = "ToolFailed"
    error_type: str
    message: str
    retryable: bool = False
    latency_ms: Millis = 0.0


class ToolTimedOut(HashedCallEvent):
    """A call exceeded its timeout and was cancelled. For a read-only call it is a
    failure; for a mutating call (an intent was journaled) the outcome is **unknown**: the
    request may have taken effect, so the call is settled like an intent without outcome
    after a crash (same key if idempotent, ``reconcile``, else a person)."""

    type: Literal["ToolTimedOut"] = "ToolTimedOut"
    timeout_s: float


class ToolOutcomeUnknown(HashedCallEvent):
    """A mutating call lost track of its request after it may have left (a connection
    reset or a read error after sending): its outcome is unknown, never a failure."""

    type: Literal["ToolOutcomeUnknown"] = "ToolOutcomeUnknown"
    error_type: str
    message: str


class ToolReconciled(HashedCallEvent):
    """A call's ``reconcile(key)`` hook said the effect did not happen: the unknown
    outcome is settled, and the call may run again (through the whole guard)."""

    type: Literal["ToolReconciled"] = "ToolReconciled"
    outcome: Literal["not_happened"] = "not_happened"


class SchemaValidationFailed(CallEvent):
    """A call's arguments or result did not match the tool's schema."""

    type: Literal["SchemaValidationFailed"] = "SchemaValidationFailed"
    where: Literal["args", "result"]
    errors: list[JSON]
    sensitive_fields: list[str] | None = None
    """The fields of the tool's arguments and result it declares sensitive
    (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """The fields of its argument and result models typed as secrets."""


class ModelResponded(Event):
    """A model call's response with its usage; never requested twice."""

    type: Literal["ModelResponded"] = "ModelResponded"
    key: str
    index: int
    model: str
    request: JSON
    response: JSON
    tokens_in: int
    tokens_out: int
    cost_usd: float
    latency_ms: Millis
    sensitive_fields: list[str] | None = None
    """Every field the engine's tools declare sensitive: a prompt or an answer may carry
    any of them (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """Every field the engine's tools type as secrets."""


class RetryScheduled(CallEvent):
    """A failed call will be tried again (attempt ``attempt``) once timer ``timer_id`` fires;
    the step is suspended meanwhile and the run holds no worker."""

    type: Literal["RetryScheduled"] = "RetryScheduled"
    attempt: int
    timer_id: str
    delay_s: float


class ToolRefused(HashedCallEvent):
    """A call was refused: before it ran — not on the allow-list, denied by policy, its
    approval rejected, invalid or expired, a budget exhausted, a secret of another
    environment — or while it ran, when it tried to reach a host its tool does not declare
    (``egress_denied``: that request was never sent)."""

    type: Literal["ToolRefused"] = "ToolRefused"
    cause: Literal[
        "not_allowed", "policy_denied", "approval_rejected", "approval_expired",
        "approval_invalid", "budget_exceeded", "guard_error", "egress_denied",
        "secret_refused",
    ]
    reason: str


class PolicyDecided(HashedCallEvent):
    """The policy's decision on a call, made before it ran and independent of any model."""

    type: Literal["PolicyDecided"] = "PolicyDecided"
    decision: Literal["allow", "deny", "require_approval"]
    rule_id: str | None
    policy_version: str
    reason: str = ""
    policy_digest: str | None = None
    """SHA-256 of the policy's content: proves which rule set decided."""
    environment: str | None = None
    """The environment the guard decided in (``dev``, ``prod``...): what a replay decides
    in unless told otherwise. None in journals written before it was recorded."""


class BudgetExceeded(Event):
    """A run or tenant budget would be crossed; the call did not run."""

    type: Literal["BudgetExceeded"] = "BudgetExceeded"
    metric: str
    limit: float
    used: float
    """What the total would have reached with the stopped action."""
    scope: Literal["run", "tenant"]
    action: Literal["escalate", "fail"]
    tool: str | None = None
    reason: str | None = None
    """Why a call that cannot be measured was refused (its price unknown); None when it
    would have crossed the limit."""


class ToolShadowed(CallEvent):
    """Shadow mode: a mutating call was decided on but not executed."""

    type: Literal["ToolShadowed"] = "ToolShadowed"
    args: JSON
    args_hash: str
    decision: str
    sensitive_fields: list[str] | None = None
    """The fields of the tool's arguments and result it declares sensitive
    (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """The fields of its argument and result models typed as secrets."""
