"""Typed journal events, their canonical encoding, upcasters and the hash chain.

An event is a frozen pydantic model with a stable ``type`` name and a schema version
(``VERSION``). On disk an event is the canonical JSON of its *envelope*::

    {"at": <epoch seconds>, "data": {...}, "seq": n, "type": "StepCompleted", "v": 1}

and each stored event carries ``hash = sha256(prev_hash || stored bytes)``; the first
event of a run chains from :func:`genesis_hash`, which binds the chain to its tenant and
run, so an event spliced in from another run or tenant breaks verification.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .errors import IntegrityError

JSON = Any
"""A JSON-compatible value: dict, list, str, int, float, bool or None."""


def canonical_json(value: JSON) -> bytes:
    """Encode ``value`` as canonical JSON: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def genesis_hash(tenant_id: str, run_id: str) -> str:
    """The hash a run's chain starts from: bound to the tenant and the run."""
    return hashlib.sha256(f"underway:{tenant_id}\x00{run_id}".encode()).hexdigest()


def chain_hash(prev_hash: str, stored: bytes) -> str:
    """``sha256(prev_hash || stored bytes)`` as hex."""
    h = hashlib.sha256(bytes.fromhex(prev_hash))
    h.update(stored)
    return h.hexdigest()


class Event(BaseModel):
    """Base of every journal event. Subclasses set ``type`` and ``VERSION``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    VERSION: ClassVar[int] = 1


class RunStarted(Event):
    """A run was created: which flow, its input, its first step and initial state."""

    type: Literal["RunStarted"] = "RunStarted"
    flow: str
    input: JSON
    state: JSON
    first_step: str
    idempotency_key: str | None = None
    deadline: float | None = None
    principal: str | None = None
    """Who the run acts for (a user or service id); policies match on it."""
    roles: list[str] = Field(default_factory=list)
    """The principal's roles; policies and memory access match on them."""
    signals: list[str] | None = None
    """The signal names the flow declared when the run started (None: it declared none)."""
    checked: bool = True
    """False when the run was started by flow name without the flow's code: ``input`` is
    the raw input, ``state`` and ``first_step`` are empty until a worker that has the flow
    journals :class:`InputChecked` (or fails the run when the input does not match)."""
    parent_run_id: str | None = None
    """The run (same tenant) that started this one as a child with ``ctx.start``; its
    end reaches that run's inbox."""


class InputChecked(Event):
    """A worker checked the input of a run started without its flow's code: the parsed
    input, the initial state, the first step and the signals the flow declares."""

    type: Literal["InputChecked"] = "InputChecked"
    input: JSON
    state: JSON
    first_step: str
    signals: list[str] | None = None


class StepStarted(Event):
    """A step began executing (attempt counts re-executions after a crash)."""

    type: Literal["StepStarted"] = "StepStarted"
    step: str
    attempt: int = 1


class StepCompleted(Event):
    """A step finished: where the run goes next and the RFC 6902 patch of its state."""

    type: Literal["StepCompleted"] = "StepCompleted"
    step: str
    next: str | None
    patch: list[JSON]


class ToolStarted(Event):
    """Write-ahead intent: a mutating call is about to run with this idempotency key."""

    type: Literal["ToolStarted"] = "ToolStarted"
    key: str
    tool: str
    index: int
    args: JSON
    args_hash: str
    sandbox_profile: str | None = None
    policy_decision: str | None = None


class ToolSucceeded(Event):
    """A call's result."""

    type: Literal["ToolSucceeded"] = "ToolSucceeded"
    key: str
    tool: str
    index: int
    args_hash: str
    result: JSON
    latency_ms: float = 0.0
    reconciled: bool = False
    """True when the result came from the tool's reconcile hook, not from running it."""
    counts: dict[str, float] | None = None
    """What the call counts against budgets: ``messages`` and ``money.<CURRENCY>``."""


class ToolFailed(Event):
    """A call raised; ``retryable`` is the tool's own verdict."""

    type: Literal["ToolFailed"] = "ToolFailed"
    key: str
    tool: str
    index: int
    args_hash: str
    error_type: str
    message: str
    retryable: bool = False
    latency_ms: float = 0.0


class ToolTimedOut(Event):
    """A call exceeded its timeout and was cancelled. For a read-only call it is a
    failure; for a mutating call (an intent was journaled) the outcome is **unknown**: the
    request may have taken effect, so the call is settled like an intent without outcome
    after a crash (same key if idempotent, ``reconcile``, else a person)."""

    type: Literal["ToolTimedOut"] = "ToolTimedOut"
    key: str
    tool: str
    index: int
    args_hash: str
    timeout_s: float


class ToolOutcomeUnknown(Event):
    """A mutating call lost track of its request after it may have left (a connection
    reset or a read error after sending): its outcome is unknown, never a failure."""

    type: Literal["ToolOutcomeUnknown"] = "ToolOutcomeUnknown"
    key: str
    tool: str
    index: int
    args_hash: str
    error_type: str
    message: str


class ToolReconciled(Event):
    """A call's ``reconcile(key)`` hook said the effect did not happen: the unknown
    outcome is settled, and the call may run again (through the whole guard)."""

    type: Literal["ToolReconciled"] = "ToolReconciled"
    key: str
    tool: str
    index: int
    args_hash: str
    outcome: Literal["not_happened"] = "not_happened"


class SchemaValidationFailed(Event):
    """A call's arguments or result did not match the tool's schema."""

    type: Literal["SchemaValidationFailed"] = "SchemaValidationFailed"
    key: str
    tool: str
    index: int
    where: Literal["args", "result"]
    errors: list[JSON]


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
    latency_ms: float


class ValueRecorded(Event):
    """A non-deterministic value (time, uuid, random) observed by a step."""

    type: Literal["ValueRecorded"] = "ValueRecorded"
    kind: Literal["now", "uuid", "random"]
    index: int
    value: JSON


class TimerSet(Event):
    """A durable timer: the run wakes at ``wake_at`` (epoch seconds)."""

    type: Literal["TimerSet"] = "TimerSet"
    timer_id: str
    wake_at: float


class TimerFired(Event):
    """A timer came due (for a wait, this means the wait timed out)."""

    type: Literal["TimerFired"] = "TimerFired"
    timer_id: str


class SignalAwaited(Event):
    """The run waits for a named signal, optionally until a timer fires."""

    type: Literal["SignalAwaited"] = "SignalAwaited"
    signal: str
    timer_id: str | None = None


class SignalReceived(Event):
    """An outside signal was delivered to the run."""

    type: Literal["SignalReceived"] = "SignalReceived"
    signal: str
    signal_id: str
    payload: JSON
    sender: str | None = None


class SignalIgnored(Event):
    """A control signal that did not apply (e.g. a resolve for a run not escalated)."""

    type: Literal["SignalIgnored"] = "SignalIgnored"
    signal: str
    signal_id: str
    reason: str


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


class RetryScheduled(Event):
    """A failed call will be tried again (attempt ``attempt``) once timer ``timer_id`` fires;
    the step is suspended meanwhile and the run holds no worker."""

    type: Literal["RetryScheduled"] = "RetryScheduled"
    key: str
    tool: str
    index: int
    attempt: int
    timer_id: str
    delay_s: float


class RunDeadLettered(Event):
    """The run stopped on an error it cannot get past by itself (an unhandled exception, an
    exhausted retry budget); an operator may resume or cancel it."""

    type: Literal["RunDeadLettered"] = "RunDeadLettered"
    reason: str
    error_type: str | None = None
    step: str | None = None


class RunResumed(Event):
    """An operator resumed a dead run, at ``step`` (None: the step where it stopped).

    ``decision`` holds the verified signed decision when the resume came signed
    (``underway approvals resolve --resolution resume``); None for an unsigned
    ``underway runs resume``. Calls the run goes on with pass the whole guard again.
    """

    type: Literal["RunResumed"] = "RunResumed"
    by: str
    step: str | None = None
    decision: JSON = None


class RunCompleted(Event):
    """The run finished with a result."""

    type: Literal["RunCompleted"] = "RunCompleted"
    result: JSON


class RunFailed(Event):
    """The run ended in failure."""

    type: Literal["RunFailed"] = "RunFailed"
    reason: str
    error_type: str | None = None
    step: str | None = None


class RunCancelled(Event):
    """The run was cancelled at a step boundary; ``by`` says who asked."""

    type: Literal["RunCancelled"] = "RunCancelled"
    by: str
    reason: str = ""


class ChildStarted(Event):
    """The run starts a child run (``ctx.start``): committed before the child is created,
    with the child's run id, so a step re-run after a crash starts the same child and a
    cancel of this run reaches it. ``detached``: cancelling this run leaves it running."""

    type: Literal["ChildStarted"] = "ChildStarted"
    run_id: str
    flow: str
    key: str
    detached: bool = False


class ChildAwaited(Event):
    """The run waits (holding no worker) for child ``run_id`` to end (``ctx.wait_for``)."""

    type: Literal["ChildAwaited"] = "ChildAwaited"
    run_id: str


class ChildFinished(Event):
    """Child ``run_id`` ended: ``completed`` with ``result``, ``failed`` or ``cancelled``
    with ``error``."""

    type: Literal["ChildFinished"] = "ChildFinished"
    run_id: str
    status: Literal["completed", "failed", "cancelled"]
    result: JSON = None
    error: str | None = None


class ToolRefused(Event):
    """A call was refused before it ran: not on the allow-list, denied by policy, its
    approval rejected, invalid or expired, or a budget exhausted."""

    type: Literal["ToolRefused"] = "ToolRefused"
    key: str
    tool: str
    index: int
    args_hash: str
    cause: Literal[
        "not_allowed", "policy_denied", "approval_rejected", "approval_expired",
        "approval_invalid", "budget_exceeded", "guard_error",
    ]
    reason: str


class PolicyDecided(Event):
    """The policy's decision on a call, made before it ran and independent of any model."""

    type: Literal["PolicyDecided"] = "PolicyDecided"
    key: str
    tool: str
    index: int
    args_hash: str
    decision: Literal["allow", "deny", "require_approval"]
    rule_id: str | None
    policy_version: str
    reason: str = ""
    policy_digest: str | None = None
    """SHA-256 of the policy's content: proves which rule set decided."""


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


class ToolShadowed(Event):
    """Shadow mode: a mutating call was decided on but not executed."""

    type: Literal["ToolShadowed"] = "ToolShadowed"
    key: str
    tool: str
    index: int
    args: JSON
    args_hash: str
    decision: str


class PlanCreated(Event):
    """An agent's plan for its goal."""

    type: Literal["PlanCreated"] = "PlanCreated"
    plan: list[str]
    model: str | None = None


class PlanRevised(Event):
    """An agent revised its plan after an observation."""

    type: Literal["PlanRevised"] = "PlanRevised"
    plan: list[str]
    reason: str = ""


class ToolSelected(Event):
    """An agent's model chose the next tool call (before policy, approval or sandbox)."""

    type: Literal["ToolSelected"] = "ToolSelected"
    tool: str
    args: JSON
    reason: str = ""
    tainted: list[str] = Field(default_factory=list)
    """Where the untrusted content in the model's context came from when it chose this call
    (tool names, ``signal:<name>``, ``intake``): the arguments may carry any of it."""


class CheckpointRefused(Event):
    """A worker found a checkpoint row the journal does not vouch for (edited, spliced from
    another run or tenant, stale, or missing), ignored it and folded the whole journal."""

    type: Literal["CheckpointRefused"] = "CheckpointRefused"
    checkpoint_seq: int | None
    """The seq the refused row named (for a missing row: the seq last committed)."""
    reason: str


RunEvent: TypeAlias = (
    RunStarted
    | InputChecked
    | StepStarted
    | StepCompleted
    | ToolStarted
    | ToolSucceeded
    | ToolFailed
    | ToolTimedOut
    | ToolOutcomeUnknown
    | ToolReconciled
    | SchemaValidationFailed
    | ModelResponded
    | ValueRecorded
    | TimerSet
    | TimerFired
    | SignalAwaited
    | SignalReceived
    | SignalIgnored
    | Escalated
    | EscalationResolved
    | RetryScheduled
    | RunDeadLettered
    | RunResumed
    | RunCompleted
    | RunFailed
    | RunCancelled
    | ChildStarted
    | ChildAwaited
    | ChildFinished
    | ToolRefused
    | PolicyDecided
    | ApprovalRequested
    | ApprovalGranted
    | ApprovalRejected
    | ApprovalInvalid
    | ApprovalExpired
    | EscalationAnswered
    | EscalationExpired
    | BudgetExceeded
    | ToolShadowed
    | PlanCreated
    | PlanRevised
    | ToolSelected
    | CheckpointRefused
)
"""Every event type the journal can hold: what the journal, the fold and the executor pass
around (a ``match`` over it ends with ``assert_never``)."""

AnyEvent = Annotated[RunEvent, Field(discriminator="type")]
"""Every event type the journal can hold, discriminated by ``type``."""

_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)
EVENT_TYPES: dict[str, type[Event]] = {
    cls.model_fields["type"].default: cls
    for cls in Event.__subclasses__()
}

Upcaster = Callable[[dict[str, JSON]], dict[str, JSON]]
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function turning ``event_type`` data of ``from_version`` into the next one."""

    def register(fn: Upcaster) -> Upcaster:
        _UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


def envelope(event: Event, *, seq: int, at: float) -> dict[str, JSON]:
    """The dict that is canonically encoded and stored for ``event``."""
    data = event.model_dump(mode="json")
    event_type = data.pop("type")
    return {"at": at, "data": data, "seq": seq, "type": event_type, "v": event.VERSION}


def from_envelope(env: dict[str, JSON]) -> RunEvent:
    """Rebuild an event from its stored envelope, upcasting old versions first."""
    event_type = env.get("type")
    cls = EVENT_TYPES.get(event_type) if isinstance(event_type, str) else None
    if cls is None:
        raise IntegrityError(f"unknown event type {event_type!r} at seq {env.get('seq')}")
    version = int(env.get("v", 1))
    data: dict[str, JSON] = dict(env["data"])
    while version < cls.VERSION:
        step = _UPCASTERS.get((cls.__name__, version))
        if step is None:
            raise IntegrityError(
                f"no upcaster for {cls.__name__} v{version} -> v{version + 1}; "
                "register one with @underway.events.upcaster"
            )
        data = step(data)
        version += 1
    if version > cls.VERSION:
        raise IntegrityError(
            f"{cls.__name__} v{version} is newer than this code (v{cls.VERSION}); upgrade underway"
        )
    data["type"] = cls.__name__
    return _ADAPTER.validate_python(data)


__all__ = [
    "EVENT_TYPES",
    "JSON",
    "AnyEvent",
    "ApprovalExpired",
    "ApprovalGranted",
    "ApprovalInvalid",
    "ApprovalRejected",
    "ApprovalRequested",
    "BudgetExceeded",
    "CheckpointRefused",
    "ChildAwaited",
    "ChildFinished",
    "ChildStarted",
    "Escalated",
    "EscalationAnswered",
    "EscalationExpired",
    "EscalationResolved",
    "Event",
    "InputChecked",
    "ModelResponded",
    "PlanCreated",
    "PlanRevised",
    "PolicyDecided",
    "RetryScheduled",
    "RunCancelled",
    "RunCompleted",
    "RunDeadLettered",
    "RunFailed",
    "RunResumed",
    "RunStarted",
    "SchemaValidationFailed",
    "SignalAwaited",
    "SignalIgnored",
    "SignalReceived",
    "StepCompleted",
    "StepStarted",
    "TimerFired",
    "TimerSet",
    "ToolFailed",
    "ToolOutcomeUnknown",
    "ToolReconciled",
    "ToolRefused",
    "ToolSelected",
    "ToolShadowed",
    "ToolStarted",
    "ToolSucceeded",
    "ToolTimedOut",
    "Upcaster",
    "ValueRecorded",
    "canonical_json",
    "chain_hash",
    "envelope",
    "from_envelope",
    "genesis_hash",
    "upcaster",
]
