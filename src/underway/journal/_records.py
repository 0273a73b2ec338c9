"""The records a run's state is made of: calls, escalations, approvals, children, and
the reserved signals and ids the fold reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import events as ev
from ..events import JSON

RunStatus = Literal[
    "ready", "waiting", "escalated", "dead", "completed", "failed", "cancelled"
]
"""Where a run stands. ``completed``, ``failed`` and ``cancelled`` are final; ``dead`` waits
for an operator to resume or cancel it."""

FINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

CallStatus = Literal["started", "succeeded", "failed", "retry", "awaiting", "approved"]
"""``awaiting``: a call held for a person (approval or question); ``approved``: its
signed approval was verified and it may run."""


@dataclass(slots=True)
class Recorded:
    """A decoded journal event with its position and time."""

    seq: int
    at: float
    event: ev.RunEvent


@dataclass(slots=True)
class CallRecord:
    """What the journal says about one call of the current step."""

    index: int
    key: str
    tool: str
    args_hash: str
    status: CallStatus
    result: JSON = None
    error_type: str | None = None
    message: str | None = None
    retryable: bool = False
    attempts: int = 1
    maybe_happened: bool = False
    """An intent of this call was journaled and no outcome has settled it since: an
    earlier attempt may have taken effect (a crash, a timeout, a lost connection)."""
    approval_requests: int = 0
    """Approval requests journaled for this call; each has its own request id."""


class Escalation(BaseModel):
    """Why an escalated run waits for a person, and what an answer or resolution must name.

    ``cause`` is the :class:`~underway.events.Escalated` cause; ``was`` the status the run
    had when it escalated (a waiting run goes back to waiting once resolved);
    ``request_id`` is what a signed answer or resolution names. A question
    (``cause == "question"``) also holds ``question``, ``context``, ``required_role`` and
    ``expires_at``.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    reason: str
    key: str | None = None
    tool: str | None = None
    index: int | None = None
    was: str = "ready"
    cause: str = "other"
    request_id: str | None = None
    question: str | None = None
    context: JSON = None
    required_role: str | None = None
    expires_at: float | None = None

    @property
    def is_question(self) -> bool:
        """True when the run asked a person a question (``ctx.ask``)."""
        return self.cause == "question"

    def to_json(self) -> dict[str, JSON]:
        """The record as checkpoints hold it (a question's fields only for a question)."""
        return self.model_dump(mode="json", exclude=None if self.is_question else _QUESTION)


_QUESTION = {"question", "context", "required_role", "expires_at"}


class ApprovalRecord(BaseModel):
    """A verified signed approval of one call of the current step (from
    :class:`~underway.events.ApprovalGranted`), checked again right before the call runs:
    ``decision`` is the signed decision, ``required_role`` and ``expires_at`` those of the
    request it approves."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    decision: JSON
    required_role: str | None = None
    expires_at: float | None = None
    request_id: str | None = None

    def to_json(self) -> dict[str, JSON]:
        """The record as checkpoints hold it."""
        return self.model_dump(mode="json")


class ChildRecord(BaseModel):
    """A child run this run started (:class:`~underway.events.ChildStarted`, journaled at
    ``seq``): its ``flow``, ``key`` and whether it is ``detached``; once its end reached
    this run (:class:`~underway.events.ChildFinished`), ``status`` with ``result`` or
    ``error``, and ``tainted_by``: where the untrusted content that shaped its result came
    from, and ``marks``: the parts of its result trusted sources do not account for."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    flow: str
    key: str
    detached: bool = False
    seq: int = 0
    status: Literal["completed", "failed", "cancelled"] | None = None
    result: JSON = None
    error: str | None = None
    tainted_by: list[str] = Field(default_factory=list)
    marks: list[dict[str, JSON]] = Field(default_factory=list)

    @property
    def ended(self) -> bool:
        """True once the child's end is journaled in this run."""
        return self.status is not None

    def to_json(self) -> dict[str, JSON]:
        """The record as checkpoints hold it (those of untainted children as they were)."""
        data = self.model_dump(mode="json")
        for name in ("tainted_by", "marks"):
            if not data[name]:
                del data[name]
        return data


PendingApproval = ev.ApprovalRequested
"""The approval request a waiting run waits for: the journaled request itself."""


def pending_json(p: ev.ApprovalRequested) -> dict[str, JSON]:
    data = p.model_dump(mode="json", exclude={"type"})
    # A request of a tool that hides nothing encodes as it did before tools declared it.
    for name in ("sensitive_fields", "secret_fields", "summary", "money"):
        if data.get(name) is None:
            data.pop(name, None)
    return data


def pending_from(data: dict[str, Any]) -> ev.ApprovalRequested:
    known = ev.ApprovalRequested.model_fields
    return ev.ApprovalRequested.model_validate({k: v for k, v in data.items() if k in known})



APPROVAL_SIGNAL = "underway.approval"
"""The reserved signal carrying a signed approval decision."""
ANSWER_SIGNAL = "underway.answer"
"""The reserved signal carrying a signed answer to a question."""

REFUSAL_ERRORS: dict[str, str] = {
    "not_allowed": "ToolNotAllowed",
    "policy_denied": "PolicyDenied",
    "approval_rejected": "ApprovalRejected",
    "approval_expired": "ApprovalExpired",
    "approval_invalid": "ApprovalInvalid",
    "budget_exceeded": "BudgetExceeded",
    "guard_error": "GuardError",
    "egress_denied": "EgressDenied",
    "secret_refused": "SecretRefused",
}
"""The ``error_type`` a refused call raises, by ``ToolRefused.cause``."""


def shadow_result(tool: str) -> JSON:
    """What a shadowed (not executed) mutating call returns to its step."""
    return {"shadowed": True, "tool": tool}


def request_id_for(key: str, n: int = 1) -> str:
    """The id of the ``n``-th approval request of the call with idempotency ``key``: a call
    refused or rejected and then tried again asks anew, under a new id, so no decision on
    an earlier request can settle a later one."""
    return f"apr:{key}" if n <= 1 else f"apr{n}:{key}"
