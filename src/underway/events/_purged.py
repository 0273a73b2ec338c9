"""What is left of an event once retention purged its payload: its type, seq, time and the
fields of its **skeleton** — what happened and what decided it, never what it was about.

:data:`SKELETON` names, per event type, the fields a purge keeps. They are names, codes,
ids the runtime made (idempotency keys, request and timer ids, child run ids), counts,
durations, usage (tokens, cost, and what a call counts against budgets: messages and
amounts of money by currency, so budgets and usage figures still add up) and policy
outcomes: nothing a user, a tool, a model or a person wrote
(inputs, state, arguments and results, messages, reasons, comments, evidence), no hash of
such content (a hash of a phone number is found by trying every number), and no one's
identity (``by``, ``sender``, ``principal``, approver ids). docs/data-protection.md has
the table.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import JSON, Event

PURGED = "[purged]"
"""What readers show in place of a purged payload."""

_CALL = ("key", "tool", "index")

SKELETON: dict[str, tuple[str, ...]] = {
    "RunStarted": ("flow", "first_step", "checked", "parent_run_id", "deadline", "purpose",
                   "forked_from"),
    "InputChecked": ("first_step",),
    "StepStarted": ("step", "attempt", "worker"),
    "StepCompleted": ("step", "next"),
    "ValueRecorded": ("kind", "index"),
    "VersionMarked": ("change_id", "patched", "step"),
    "TimerSet": ("timer_id", "wake_at"),
    "TimerFired": ("timer_id",),
    "PlanCreated": ("model",),
    "PlanRevised": (),
    "ToolSelected": ("tool",),
    "ToolStarted": (*_CALL, "sandbox_profile", "policy_decision"),
    "ToolSucceeded": (*_CALL, "latency_ms", "reconciled", "counts"),
    "ToolFailed": (*_CALL, "error_type", "retryable", "latency_ms"),
    "ToolTimedOut": (*_CALL, "timeout_s"),
    "ToolOutcomeUnknown": (*_CALL, "error_type"),
    "ToolReconciled": (*_CALL, "outcome"),
    "SchemaValidationFailed": (*_CALL, "where"),
    "ModelResponded": ("key", "index", "model", "tokens_in", "tokens_out", "cost_usd",
                       "latency_ms"),
    "RetryScheduled": (*_CALL, "attempt", "timer_id", "delay_s"),
    "ToolRefused": (*_CALL, "cause"),
    "PolicyDecided": (*_CALL, "decision", "rule_id", "policy_version", "policy_digest"),
    "BudgetExceeded": ("metric", "limit", "used", "scope", "action", "tool"),
    "ToolShadowed": (*_CALL, "decision"),
    "Escalated": ("cause", "key", "tool", "index", "request_id", "required_role",
                  "expires_at"),
    "EscalationResolved": ("key", "resolution"),
    "ApprovalRequested": ("request_id", *_CALL, "required_role", "expires_at", "rule_id",
                          "policy_version"),
    "ApprovalGranted": ("request_id", "required_role", "expires_at"),
    "ApprovalRejected": ("request_id",),
    "ApprovalInvalid": ("request_id", "reason"),
    "ApprovalExpired": ("request_id",),
    "EscalationAnswered": ("request_id",),
    "EscalationExpired": ("request_id",),
    "SignalAwaited": ("signal", "timer_id"),
    "SignalReceived": ("signal", "signal_id"),
    "SignalIgnored": ("signal", "signal_id"),
    "ChildStarted": ("run_id", "flow", "key", "detached"),
    "ChildAwaited": ("run_id",),
    "ChildFinished": ("run_id", "status"),
    "RunDeadLettered": ("error_type", "step"),
    "RunResumed": ("step",),
    "RunCompleted": (),
    "RunFailed": ("error_type", "step"),
    "RunCancelled": (),
    "RunForked": ("run_id", "seq", "step"),
    "CheckpointRefused": ("checkpoint_seq",),
}
"""The fields of each event type a purge keeps (a type not named keeps none)."""


def skeleton(event_type: str, data: dict[str, JSON]) -> dict[str, JSON]:
    """The fields of an event's ``data`` (its envelope's ``data``) that its skeleton keeps:
    only those :data:`SKELETON` names for ``event_type``, only scalars (or, for a call's
    ``counts``, names and numbers)."""
    return {
        name: data[name] for name in SKELETON.get(event_type, ())
        if name in data and _plain(data[name])
    }


def _plain(value: JSON) -> bool:
    if value is None or isinstance(value, str | int | float):
        return True
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in value.items())


class PayloadPurged(Event):
    """An event whose payload retention purged (never journaled: a reader meets it in
    place of the event): the purged event's type and seq and time (the record's), and the
    fields of its skeleton (:data:`SKELETON`)."""

    type: Literal["PayloadPurged"] = "PayloadPurged"
    event_type: str
    """The type of the event that was purged (``ToolSucceeded``, ...)."""
    kept: dict[str, JSON] = Field(default_factory=dict)
    """The skeleton's fields."""
