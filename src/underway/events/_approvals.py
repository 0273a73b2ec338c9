"""People in the loop: escalations, questions and their answers, approval requests and signed
decisions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import JSON, Event


class Escalated(Event):
    """The run needs a person: e.g. a non-idempotent call's outcome is unknown."""

    type: Literal["Escalated"] = "Escalated"
    reason: str
    key: str | None = None
    tool: str | None = None
    index: int | None = None
    cause: str = "other"
    """``unknown_outcome``, ``nondeterminism``, ``deadline``, ``budget``, ``question``,
    ``replan`` or ``other``."""
    hook: str | None = None
    """The user hook that did not answer (``reconcile``, ``compensate``), when one is why
    the run escalated; None otherwise (and in events of earlier versions)."""
    request_id: str | None = None
    """For a question: the id a signed answer must name."""
    question: str | None = None
    context: JSON = None
    required_role: str | None = None
    expires_at: float | None = None


class EscalationResolved(Event):
    """A person resolved an escalation: the effect happened, did not, or may be retried.

    ``decision`` holds the verified signed decision when the resolution came signed
    (``underway approvals resolve``); None for an unsigned ``underway runs resolve``.
    """

    type: Literal["EscalationResolved"] = "EscalationResolved"
    key: str | None
    resolution: Literal["succeeded", "failed", "retry"]
    result: JSON = None
    by: str
    decision: JSON = None


class ApprovalRequested(Event):
    """A call waits for a person's signed decision on exactly these arguments."""

    type: Literal["ApprovalRequested"] = "ApprovalRequested"
    request_id: str
    key: str
    tool: str
    index: int
    args: JSON
    args_hash: str
    evidence: JSON = None
    risks: list[str] = Field(default_factory=list)
    required_role: str | None = None
    expires_at: float
    rule_id: str | None = None
    policy_version: str | None = None
    sensitive_fields: list[str] | None = None
    """The fields of the tool's arguments and result it declares sensitive
    (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """The fields of its argument and result models typed as secrets."""
    summary: str | None = None
    """One line an approver reads: the step's ``summary=``, else the tool's template
    (None in events of earlier versions)."""
    money: dict[str, JSON] | None = None
    """The money the guard read for the call: ``amount`` (a decimal string),
    ``currency``, ``direction`` and, when the tool names it, ``account``."""


class ApprovalGranted(Event):
    """A verified, signed approval of a request (the whole signed decision is kept)."""

    type: Literal["ApprovalGranted"] = "ApprovalGranted"
    request_id: str
    approver_id: str
    decision: JSON
    required_role: str | None = None
    """The role the request required, checked again right before the call runs."""
    expires_at: float | None = None
    """The request's expiry, checked again right before the call runs."""


class ApprovalRejected(Event):
    """A verified, signed rejection of a request."""

    type: Literal["ApprovalRejected"] = "ApprovalRejected"
    request_id: str
    approver_id: str
    decision: JSON


class ApprovalInvalid(Event):
    """A submitted decision failed verification; it changes nothing. ``reason`` is a code:
    ``malformed``, ``not_pending`` (the run does not wait for that request: decided,
    expired or never made), ``unknown_approver``, ``revoked``, ``wrong_tenant``,
    ``wrong_request``, ``wrong_run``, ``wrong_tool``, ``args_mismatch``, ``missing_role``,
    ``bad_signature``, ``expired``, ``decision_expiry_mismatch``, ``wrong_decision_kind``
    or ``replayed_nonce``."""

    type: Literal["ApprovalInvalid"] = "ApprovalInvalid"
    request_id: str | None
    approver_id: str | None
    reason: str


class ApprovalExpired(Event):
    """No valid decision arrived before the request's expiry."""

    type: Literal["ApprovalExpired"] = "ApprovalExpired"
    request_id: str


class EscalationExpired(Event):
    """No valid answer to a question arrived before its expiry; the step hears it as a
    failed ``ctx.ask`` (``QuestionExpired``)."""

    type: Literal["EscalationExpired"] = "EscalationExpired"
    request_id: str


class EscalationAnswered(Event):
    """A person answered a question with a verified, signed answer."""

    type: Literal["EscalationAnswered"] = "EscalationAnswered"
    request_id: str
    approver_id: str
    answer: JSON
    decision: JSON
