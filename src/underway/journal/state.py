"""A run's state and the fold that derives it from the journal.

``RunState`` is never stored as the truth: it is ``fold(events)``. A checkpoint is a
``RunState`` serialized at some sequence number, so recovery is checkpoint + fold(tail).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, assert_never

from .. import events as ev
from ..control import CHILD as CHILD_SIGNAL
from ..events import JSON
from ..lineage import Lineage, restored
from ..redaction import Hidden, schema_failure
from ._records import (
    ANSWER_SIGNAL,
    APPROVAL_SIGNAL,
    FINAL_STATUSES,
    REFUSAL_ERRORS,
    ApprovalRecord,
    CallRecord,
    CallStatus,
    ChildRecord,
    Escalation,
    PendingApproval,
    Recorded,
    RunStatus,
    pending_from,
    pending_json,
    request_id_for,
    shadow_result,
)
from .patch import apply_patch


@dataclass(slots=True)
class RunState:
    """The folded state of one run."""

    tenant_id: str
    run_id: str
    flow: str = ""
    status: RunStatus = "ready"
    input: JSON = None
    state: JSON = None
    step: str | None = None
    attempt: int = 0
    calls: list[CallRecord] = field(default_factory=list)
    values: list[JSON] = field(default_factory=list)
    waiting_signal: str | None = None
    timer_id: str | None = None
    wake_at: float | None = None
    signal: dict[str, JSON] | None = None
    timed_out: bool = False
    escalation: Escalation | None = None
    """Why the run is escalated, while it is."""
    result: JSON = None
    error: str | None = None
    deadline: float | None = None
    idempotency_key: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    seq: int = 0
    steps_completed: int = 0
    retries: int = 0
    deadline_escalated: bool = False
    tool_calls: int = 0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    principal: str | None = None
    roles: list[str] = field(default_factory=list)
    read_calls: int = 0
    """Read-only calls made (``tool_calls`` counts mutating intents)."""
    messages: int = 0
    money: dict[str, float] = field(default_factory=dict)
    pending_approval: PendingApproval | None = None
    """The approval request the run waits for."""
    approvals: dict[str, ApprovalRecord] = field(default_factory=dict)
    """Verified signed approvals of the current step's calls, by idempotency key."""
    model_usage: dict[str, dict[str, float]] = field(default_factory=dict)
    """Model calls, tokens and cost by request ``kind`` (for per-route budgets)."""
    dead_request: str | None = None
    """While the run is dead: the id a signed resume must name (one per dead-lettering)."""
    signals: list[str] | None = None
    """The signal names the run's flow declared when it started (None: none declared)."""
    input_checked: bool = True
    """False while a run started by flow name, without the flow's code, waits for a worker
    to check its input (see :class:`~underway.events.InputChecked`)."""
    parent_run_id: str | None = None
    trace_context: dict[str, str] | None = None
    subject: str | None = None
    """The data subject the run is about (None: it names none)."""
    purpose: str = "operations"
    """What the run is for."""
    consent: str | None = None
    """The consent reference the run was started on."""
    approval_requested_at: float | None = None
    """When the pending approval was requested (journal time)."""
    """The run that started this one with ``ctx.start`` (None: started from outside)."""
    children: dict[str, ChildRecord] = field(default_factory=dict)
    """Child runs this run started, by run id."""
    awaiting_child: str | None = None
    """The child run this run waits for (``ctx.wait_for``)."""
    purged: bool = False
    """Retention purged the run's payloads: its input, state, result and calls are gone;
    what is left is the skeleton of its events (:class:`~underway.events.PayloadPurged`)."""
    versions: dict[str, bool] = field(default_factory=dict)
    """The run's answer to each ``ctx.version(change_id)`` it asked: True for the new code
    path, False for the old one (:class:`~underway.events.VersionMarked`)."""
    forked_from: str | None = None
    """The run this one was forked from (``underway runs fork``), if any."""
    lineage_record: Lineage | None = None
    """What the run's start journaled in ``RunStarted.lineage`` (None: nothing); read
    :attr:`lineage`, the whole of what the run inherited."""
    tainted_by: list[str] = field(default_factory=list)
    """Once the run completed: where the untrusted content that shaped its result came
    from (:attr:`~underway.events.RunCompleted.tainted_by`; empty: none did)."""
    marks: list[dict[str, JSON]] = field(default_factory=list)
    """Once the run completed: the parts of its result that trusted sources do not account
    for (:attr:`~underway.events.RunCompleted.marks`; empty: none)."""
    child_taint: list[str] = field(default_factory=list)
    """Where the untrusted content of the child outcomes the run received came from, in
    order (:attr:`~underway.events.StepCompleted.child_taint`)."""

    @property
    def lineage(self) -> Lineage:
        """What the run inherited and passes on (:class:`~underway.lineage.Lineage`): its
        journaled record with its subject, purpose, consent and trace context."""
        return restored(self.lineage_record, idempotency_key=self.idempotency_key,
                        subject=self.subject, purpose=self.purpose, consent=self.consent,
                        trace_context=self.trace_context)

    @property
    def final(self) -> bool:
        """True once the run has completed, failed or been cancelled."""
        return self.status in FINAL_STATUSES

    def call(self, index: int) -> CallRecord | None:
        """The journaled record of call ``index`` in the current step, if any."""
        return self.calls[index] if index < len(self.calls) else None

    def to_json(self, *, shared: bool = False) -> dict[str, JSON]:
        """A JSON snapshot of this state (a checkpoint's content). ``shared``: the snapshot
        holds this state's own values instead of copies of them, for a caller that encodes
        it before the state changes again (a checkpoint need not copy a conversation to
        encode it)."""
        if shared:
            data = _fields(self)
            data["calls"] = [_fields(c) for c in self.calls]
        else:
            data = dataclasses.asdict(self)
        # The records are frozen models; checkpoints hold them as the dicts they always were.
        data["escalation"] = None if self.escalation is None else self.escalation.to_json()
        data["pending_approval"] = (
            None if self.pending_approval is None else pending_json(self.pending_approval)
        )
        data["approvals"] = {k: a.to_json() for k, a in self.approvals.items()}
        data["children"] = {k: c.to_json() for k, c in self.children.items()}
        # Fields a run has only once it uses what they record: checkpoints of runs that do
        # not stay as they were, byte for byte.
        for name, unused in (("versions", {}), ("forked_from", None), ("lineage_record", None),
                             ("tainted_by", []), ("marks", []),
                             ("child_taint", [])):
            if data[name] == unused:
                del data[name]
        if self.lineage_record is not None:
            data["lineage_record"] = self.lineage_record.model_dump(mode="json",
                                                                    exclude_defaults=True)
        if not self.purged:
            # Only a purged run's state says so; checkpoints (never of a purged run) stay
            # as they were.
            del data["purged"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        """Rebuild a state from :meth:`to_json` output."""
        known = cls.__dataclass_fields__
        # A checkpoint written by a newer version may hold fields this one does not know
        # (a rolling deploy): they are dropped, the rest of the state is what it says.
        data = {k: v for k, v in data.items() if k in known}
        data["calls"] = [
            CallRecord(**{k: v for k, v in c.items() if k in CallRecord.__dataclass_fields__})
            for c in data.get("calls", [])
        ]
        if data.get("escalation") is not None:
            data["escalation"] = Escalation.model_validate(data["escalation"])
        if data.get("pending_approval") is not None:
            data["pending_approval"] = pending_from(data["pending_approval"])
        data["approvals"] = {
            k: ApprovalRecord.model_validate(a) for k, a in (data.get("approvals") or {}).items()
        }
        data["children"] = {
            k: ChildRecord.model_validate(c) for k, c in (data.get("children") or {}).items()
        }
        if data.get("lineage_record") is not None:
            data["lineage_record"] = Lineage.model_validate(data["lineage_record"])
        return cls(**data)

    def clone(self) -> RunState:
        """A deep copy that the fold may change freely."""
        return copy.deepcopy(self)


def _fields(record: RunState | CallRecord) -> dict[str, Any]:
    """The fields of a record as a dict of its own values (``dataclasses.asdict`` without
    the copies)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def _set_call(s: RunState, rec: CallRecord, *, settles: bool = False) -> None:
    """Record ``rec`` as call ``rec.index``; a record of the same call keeps its attempts,
    its approval requests and — unless this outcome ``settles`` it — its unknown outcome."""
    if rec.index < len(s.calls):
        old = s.calls[rec.index]
        if old.key == rec.key:
            rec.attempts, rec.approval_requests = old.attempts, old.approval_requests
            rec.maybe_happened = rec.maybe_happened or (old.maybe_happened and not settles)
        s.calls[rec.index] = rec
    elif rec.index == len(s.calls):
        s.calls.append(rec)
    else:
        # A read-only call's outcome may be journaled without its predecessors' intents.
        s.calls.extend(
            CallRecord(i, "", "", "", "retry") for i in range(len(s.calls), rec.index)
        )
        s.calls.append(rec)


def _request_key(request_id: str) -> str:
    return request_id.split(":", 1)[1] if ":" in request_id else request_id


def _count_read(s: RunState, index: int, key: str) -> None:
    """Count a call outcome as a read-only call when no intent preceded it."""
    old = s.call(index)
    if old is None or old.key != key or old.status not in ("started", "retry"):
        s.read_calls += 1


def _settle_approval(
    s: RunState, request_id: str, status: CallStatus, error: tuple[str, str] | None
) -> None:
    key = _request_key(request_id)
    for c in s.calls:
        if c.key == key and c.status == "awaiting":
            c.status = status
            if error is not None:
                c.error_type, c.message = error
    s.pending_approval = None
    if s.status == "waiting" and s.waiting_signal == APPROVAL_SIGNAL:
        s.status, s.waiting_signal, s.wake_at = "ready", None, None


def _lost_track(
    s: RunState, e: ev.ToolTimedOut | ev.ToolOutcomeUnknown, error_type: str, message: str
) -> None:
    """A call that timed out or lost its connection. With an intent journaled (a mutating
    call) its outcome is unknown — it stays ``started``; a read-only call failed."""
    old = s.call(e.index)
    if old is not None and old.key == e.key and old.status == "started":
        old.error_type, old.message, old.maybe_happened = error_type, message, True
        return
    _count_read(s, e.index, e.key)
    _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "failed", None,
                            error_type, message, True))


def apply(s: RunState, rec: Recorded) -> RunState:
    """Apply one event to ``s`` (in place) and return it."""
    e = rec.event
    s.seq = rec.seq
    s.updated_at = rec.at
    # Each case is a type test tried in turn; no event type derives from another, so the
    # order only sets the cost, and the events every step journals come early.
    match e:
        case ev.StepStarted():
            s.attempt = e.attempt
        case ev.ToolSucceeded():
            _count_read(s, e.index, e.key)
            _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "succeeded", e.result),
                      settles=True)
            for name, n in (e.counts or {}).items():
                if name == "messages":
                    s.messages += int(n)
                elif name.startswith("money."):
                    s.money[name[6:]] = s.money.get(name[6:], 0.0) + n
        case ev.StepCompleted():
            s.state = apply_patch(s.state, e.patch)
            s.step, s.attempt, s.calls, s.values = e.next, 0, [], []
            s.signal, s.timed_out = None, False
            s.steps_completed += 1
            s.approvals = {}
            if e.child_taint:
                s.child_taint += [src for src in e.child_taint if src not in s.child_taint]
        case ev.RunStarted():
            s.flow, s.input, s.state = e.flow, copy.deepcopy(e.input), copy.deepcopy(e.state)
            s.step, s.status, s.deadline = e.first_step, "ready", e.deadline
            s.idempotency_key, s.created_at = e.idempotency_key, rec.at
            s.principal, s.roles = e.principal, list(e.roles)
            s.signals = None if e.signals is None else list(e.signals)
            s.input_checked = e.checked
            s.parent_run_id = e.parent_run_id
            s.trace_context = e.trace_context
            s.subject, s.purpose, s.consent = e.subject, e.purpose, e.consent
            s.forked_from = e.forked_from
            s.lineage_record = e.lineage
            if e.fork is not None:
                _carry_over(s, e.fork)
        case ev.InputChecked():
            s.input, s.state = copy.deepcopy(e.input), copy.deepcopy(e.state)
            s.step, s.input_checked = e.first_step, True
            s.signals = None if e.signals is None else list(e.signals)
        case ev.ValueRecorded():
            s.values.append(e.value)
        case ev.VersionMarked():
            s.versions[e.change_id] = e.patched
        case ev.PlanCreated() | ev.PlanRevised() | ev.ToolSelected():
            # Journaled once per step execution, like a value: a re-run does not repeat it.
            s.values.append(None)
        case ev.ToolStarted():
            existing = s.call(e.index)
            if existing is None or existing.status != "started":
                _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "started",
                                        maybe_happened=True))
            s.tool_calls += 1
        case ev.ToolShadowed():
            _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "succeeded",
                                    shadow_result(e.tool)))
        case ev.ToolRefused():
            _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "failed", None,
                                    REFUSAL_ERRORS[e.cause], e.reason, False))
        case ev.ApprovalRequested():
            _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "awaiting"))
            s.calls[e.index].approval_requests += 1
            s.pending_approval, s.approval_requested_at = e, rec.at
            s.status, s.waiting_signal, s.wake_at = "waiting", APPROVAL_SIGNAL, e.expires_at
        case ev.ApprovalGranted():
            _settle_approval(s, e.request_id, "approved", None)
            s.approvals[_request_key(e.request_id)] = ApprovalRecord(
                decision=e.decision, required_role=e.required_role,
                expires_at=e.expires_at, request_id=e.request_id,
            )
        case ev.ApprovalRejected():
            comment = e.decision.get("comment") if isinstance(e.decision, dict) else ""
            # A rejection withdraws any earlier approval of the same call.
            s.approvals.pop(_request_key(e.request_id), None)
            _settle_approval(s, e.request_id, "failed", (
                "ApprovalRejected", f"rejected by {e.approver_id}: {comment or 'no comment'}"
            ))
        case ev.ApprovalExpired():
            _settle_approval(s, e.request_id, "failed", (
                "ApprovalExpired", "no valid decision arrived before the approval expired"
            ))
        case ev.EscalationAnswered():
            for c in s.calls:
                if c.key == _request_key(e.request_id) and c.status == "awaiting":
                    c.status, c.result = "succeeded", e.answer
            s.status, s.escalation = "ready", None
        case ev.EscalationExpired():
            for c in s.calls:
                if c.key == _request_key(e.request_id) and c.status == "awaiting":
                    c.status, c.error_type = "failed", "QuestionExpired"
                    c.message = "no valid answer arrived before the question expired"
            s.status, s.escalation = "ready", None
        case ev.ToolFailed():
            _count_read(s, e.index, e.key)
            _set_call(
                s,
                CallRecord(
                    e.index, e.key, e.tool, e.args_hash, "failed", None,
                    e.error_type, e.message, e.retryable,
                ),
                settles=True,
            )
        case ev.ToolTimedOut():
            _lost_track(s, e, "ToolTimedOut", f"timed out after {e.timeout_s}s")
        case ev.ToolOutcomeUnknown():
            _lost_track(s, e, e.error_type, e.message)
        case ev.ToolReconciled():
            _set_call(s, CallRecord(e.index, e.key, e.tool, e.args_hash, "retry"), settles=True)
        case ev.SchemaValidationFailed():
            old = s.call(e.index)
            _set_call(
                s,
                CallRecord(
                    e.index, e.key, e.tool, old.args_hash if old else "", "failed", None,
                    "SchemaValidationFailed", schema_failure(e.where, e.errors, Hidden.of(e)),
                    False,
                ),
            )
        case ev.ModelResponded():
            _set_call(s, CallRecord(e.index, e.key, "model", "", "succeeded", e.response))
            s.model_calls += 1
            kind = e.request.get("kind", "default") if isinstance(e.request, dict) else "default"
            u = s.model_usage.setdefault(str(kind), {
                "calls": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0})
            u["calls"] += 1
            u["tokens_in"] += e.tokens_in
            u["tokens_out"] += e.tokens_out
            u["cost_usd"] += e.cost_usd
            s.tokens_in += e.tokens_in
            s.tokens_out += e.tokens_out
            s.cost_usd += e.cost_usd
        case ev.Escalated():
            question = e.cause == "question"
            s.escalation = Escalation(
                reason=e.reason, key=e.key, tool=e.tool, index=e.index, was=s.status,
                cause=e.cause,
                # What a signed answer or resolution must name: unique within the run.
                request_id=e.request_id if question else (
                    e.request_id or f"escalation-{s.seq}"),
                question=e.question if question else None,
                context=copy.deepcopy(e.context) if question else None,
                required_role=e.required_role if question else None,
                expires_at=e.expires_at if question else None,
            )
            if question and e.index is not None and e.key is not None:
                _set_call(s, CallRecord(e.index, e.key, "ask", "", "awaiting"))
            s.status = "escalated"
            if e.cause == "deadline":
                s.deadline_escalated = True
        case ev.RetryScheduled():
            call = s.call(e.index)
            if call is not None:
                call.status, call.attempts = "retry", e.attempt
            elif e.tool == "model":
                _set_call(s, CallRecord(e.index, e.key, "model", "", "retry", attempts=e.attempt))
            s.retries += 1
        case ev.RunDeadLettered():
            s.status, s.error, s.wake_at, s.timer_id = "dead", e.reason, None, None
            s.dead_request = f"dead-{rec.seq}"
        case ev.RunResumed():
            s.status, s.error, s.dead_request = "ready", None, None
            if e.step is not None and e.step != s.step:
                s.step, s.attempt, s.calls, s.values = e.step, 0, [], []
            else:
                for c in s.calls:
                    if c.status == "failed":
                        c.status = "retry"
        case ev.EscalationResolved():
            # A run that was waiting when it escalated (a deadline) goes back to waiting.
            was = s.escalation.was if s.escalation is not None else None
            s.status, s.escalation = ("waiting" if was == "waiting" else "ready"), None
            for c in s.calls:
                if c.key == e.key and (c.status == "started" or c.maybe_happened):
                    c.maybe_happened = False
                    if e.resolution == "succeeded":
                        c.status, c.result = "succeeded", e.result
                    elif e.resolution == "failed":
                        c.status, c.error_type = "failed", "EscalationResolved"
                        c.message = f"resolved as failed by {e.by}"
                    else:
                        c.status = "retry"
        case ev.TimerSet():
            s.timer_id, s.wake_at, s.status = e.timer_id, e.wake_at, "waiting"
        case ev.TimerFired():
            if s.waiting_signal is not None:
                s.timed_out, s.waiting_signal = True, None
            s.timer_id, s.wake_at, s.status = None, None, "ready"
        case ev.SignalAwaited():
            s.waiting_signal, s.status = e.signal, "waiting"
        case ev.SignalReceived():
            s.signal = {
                "name": e.signal, "id": e.signal_id, "payload": e.payload, "sender": e.sender
            }
            s.waiting_signal, s.timer_id, s.wake_at, s.status = None, None, None, "ready"
        case ev.ChildStarted():
            s.children.setdefault(
                e.run_id,
                ChildRecord(flow=e.flow, key=e.key, detached=e.detached, seq=rec.seq),
            )
        case ev.ChildAwaited():
            s.waiting_signal, s.status, s.awaiting_child = CHILD_SIGNAL, "waiting", e.run_id
        case ev.ChildFinished():
            child = s.children.get(e.run_id)
            if child is not None:
                s.children[e.run_id] = child.model_copy(update={
                    "status": e.status, "result": copy.deepcopy(e.result), "error": e.error,
                    "tainted_by": list(e.tainted_by), "marks": copy.deepcopy(e.marks)})
            if s.awaiting_child == e.run_id:
                s.awaiting_child = None
                if s.status == "waiting" and s.waiting_signal == CHILD_SIGNAL:
                    s.status, s.waiting_signal = "ready", None
        case ev.RunCompleted():
            s.status, s.result, s.wake_at = "completed", e.result, None
            s.tainted_by = list(e.tainted_by)
            s.marks = copy.deepcopy(e.marks)
        case ev.RunFailed():
            s.status, s.error, s.wake_at = "failed", e.reason, None
        case ev.RunCancelled():
            s.status, s.error, s.wake_at = "cancelled", f"cancelled by {e.by}: {e.reason}", None
        case ev.PayloadPurged():
            _apply_purged(s, rec.at, e)
        case ev.RunLabeled():
            s.lineage_record = (s.lineage_record or Lineage()).labeled(
                e.labels, tuple(e.sensitive_fields or ()))
        case (ev.PolicyDecided() | ev.BudgetExceeded() | ev.ApprovalInvalid()
              | ev.SignalIgnored() | ev.CheckpointRefused() | ev.RunForked()):
            pass  # the audit trail's: they change nothing a run does next
        case _:
            assert_never(e)
    return s


USAGE_COUNTERS = ("tool_calls", "read_calls", "model_calls", "tokens_in", "tokens_out",
                  "cost_usd", "messages")
"""The usage counters of a :class:`RunState` a fork carries over from its parent (besides
``money.<CUR>``, the money moved by currency)."""


def usage_counters(s: RunState) -> dict[str, float]:
    """The run's usage counters as a fork carries them over (:data:`USAGE_COUNTERS` and
    ``money.<CUR>``)."""
    out: dict[str, float] = {name: float(getattr(s, name)) for name in USAGE_COUNTERS}
    out.update({f"money.{cur}": amount for cur, amount in s.money.items()})
    return out


def _carry_over(s: RunState, fork: ev.ForkOrigin) -> None:
    """A fork starts with its parent's counters and version markers (never its approvals,
    calls or waits)."""
    for name, value in fork.usage.items():
        if name.startswith("money."):
            s.money[name[6:]] = float(value)
        elif name == "cost_usd":
            s.cost_usd = float(value)
        elif name in USAGE_COUNTERS:
            setattr(s, name, int(value))
    s.versions = dict(fork.versions)


_ENDS: dict[str, RunStatus] = {
    "RunCompleted": "completed", "RunFailed": "failed", "RunCancelled": "cancelled",
    "RunDeadLettered": "dead", "RunResumed": "ready",
}


def _apply_purged(s: RunState, at: float, e: ev.PayloadPurged) -> None:
    """Fold what the skeleton of a purged event still says: the flow, where the run went
    and how it ended, and its usage; everything its payload held is gone."""
    s.purged = True
    k = e.kept
    match e.event_type:
        case "RunStarted":
            s.flow, s.created_at = str(k.get("flow") or ""), at
            s.step = _text(k.get("first_step"))
            s.parent_run_id = _text(k.get("parent_run_id"))
            s.forked_from = _text(k.get("forked_from"))
        case "StepCompleted":
            s.step = _text(k.get("next"))
            s.steps_completed += 1
        case "ToolStarted":
            s.tool_calls += 1
        case "ModelResponded":
            s.model_calls += 1
            s.tokens_in += _number(k.get("tokens_in"))
            s.tokens_out += _number(k.get("tokens_out"))
            cost = k.get("cost_usd")
            s.cost_usd += float(cost) if isinstance(cost, int | float) else 0.0
        case kind if kind in _ENDS:
            s.status, s.wake_at, s.waiting_signal = _ENDS[kind], None, None
    s.state = s.input = s.result = s.error = None


def _text(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: JSON) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def fold(records: Iterable[Recorded], *, start: RunState) -> RunState:
    """Fold ``records`` onto a copy of ``start``."""
    s = start.clone()
    for rec in records:
        apply(s, rec)
    return s


__all__ = [
    "ANSWER_SIGNAL", "APPROVAL_SIGNAL", "FINAL_STATUSES", "REFUSAL_ERRORS", "USAGE_COUNTERS",
    "ApprovalRecord", "CallRecord", "CallStatus", "ChildRecord", "Escalation",
    "PendingApproval", "Recorded", "RunState", "RunStatus", "apply", "fold", "request_id_for",
    "shadow_result", "usage_counters",
]
