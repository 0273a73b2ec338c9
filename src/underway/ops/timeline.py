"""What each event of a run's journal means, in one line: the summaries both readable
timelines show — ``underway runs show`` (text, :mod:`underway.cli._timeline`) and the
console's run page — and the totals over a run's events."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from .. import events as ev
from ..client import Recorded
from ..codec import ENCRYPTED
from ..events import JSON
from ..journal.attempts import Attempts

__all__ = ["Line", "counts", "duration", "format_time", "lines", "preview", "summarize",
           "time_left", "type_of"]

_PREVIEW = 60
_NOISE = frozenset({"key", "signal_id", "latency_ms", "checked", "reconciled", "worker"})
"""Kept fields of a purged event its timeline line leaves out (its details show them)."""
_OUTCOMES = (ev.ToolSucceeded, ev.ToolFailed, ev.ToolTimedOut, ev.SchemaValidationFailed)


@dataclass(frozen=True, slots=True)
class Line:
    """One event of the timeline."""

    seq: int
    at: float
    type: str
    summary: str


def format_time(at: float | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS.mmm`` in UTC (``-`` for None)."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def time_left(at: float, now: float) -> str:
    """How long until ``at``, for people: ``in 59m``, ``expired 3s ago``, ``no expiry``."""
    if math.isinf(at):
        return "no expiry"
    left = at - now
    span = abs(left)
    if span < 120:
        text = f"{span:.0f}s"
    elif span < 2 * 3600:
        text = f"{span / 60:.0f}m"
    elif span < 2 * 86400:
        text = f"{span / 3600:.1f}h"
    else:
        text = f"{span / 86400:.1f}d"
    return f"in {text}" if left > 0 else f"expired {text} ago"


def preview(value: JSON, limit: int = _PREVIEW) -> str:
    """Compact JSON of ``value``, cut to ``limit`` characters."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call(tool: str, index: int, key: str) -> str:
    return f"{tool} #{index} key={key}"


def summarize(rec: Recorded, *, purged_by: str = "retention") -> str:
    """One line saying what ``rec`` means (``purged_by``: what purged a purged one)."""
    e = rec.event
    if isinstance(e, ev.Encrypted):
        return ENCRYPTED
    match e:
        case ev.RunStarted():
            extra = f", idempotency key {e.idempotency_key}" if e.idempotency_key else ""
            at = f"at step {e.first_step}" if e.checked else "by name (input unchecked)"
            head = f"flow {e.flow} started {at}{extra}"
            parent = f" as a child of run {e.parent_run_id}" if e.parent_run_id else ""
            if e.fork is not None:
                parent += (f" as a fork of run {e.fork.run_id} at seq {e.fork.seq} by "
                           f"{e.fork.by}" + (f" ({e.fork.reason})" if e.fork.reason else ""))
            about = "" if e.subject is None and e.purpose == "operations" else (
                f" about subject {e.subject or '(none)'} for {e.purpose}"
                + (f" on consent {e.consent}" if e.consent else ""))
            return f"{head}{parent}{about}; input {preview(e.input, 40)}"
        case ev.InputChecked():
            return f"input checked by a worker with the flow; first step {e.first_step}"
        case ev.StepStarted():
            # Whether it follows an interruption depends on the events before it (lines).
            return f"step {e.step}, attempt {e.attempt}"
        case ev.StepCompleted():
            changes = f"{len(e.patch)} state change{'' if len(e.patch) == 1 else 's'}"
            return f"step {e.step} -> {e.next or 'end'} ({changes})"
        case ev.ToolStarted():
            return f"{_call(e.tool, e.index, e.key)} intent recorded"
        case ev.ToolSucceeded():
            how = " (reconciled: took effect before the crash)" if e.reconciled else ""
            return f"{_call(e.tool, e.index, e.key)} ok{how}: {preview(e.result, 48)}"
        case ev.ToolFailed():
            again = ", retryable" if e.retryable else ""
            return f"{_call(e.tool, e.index, e.key)} FAILED{again}: {e.error_type}: {e.message}"
        case ev.ToolTimedOut():
            return f"{_call(e.tool, e.index, e.key)} TIMED OUT after {e.timeout_s:g}s"
        case ev.SchemaValidationFailed():
            return f"{_call(e.tool, e.index, e.key)} {e.where} failed schema validation"
        case ev.ModelResponded():
            return (
                f"model {e.model} #{e.index}: {e.tokens_in} tokens in, {e.tokens_out} out, "
                f"${e.cost_usd:.4f}, {e.latency_ms:.0f} ms"
            )
        case ev.ValueRecorded():
            shown = format_time(float(e.value)) if e.kind == "now" else preview(e.value, 40)
            return f"{e.kind}() = {shown}"
        case ev.VersionMarked():
            path = "the new path" if e.patched else "the old path (started before it)"
            return f"version {e.change_id!r}: this run takes {path}"
        case ev.RunForked():
            why = f" ({e.reason})" if e.reason else ""
            return (f"forked by {e.by} into run {e.run_id} from seq {e.seq}"
                    f"{f' at step {e.step}' if e.step else ''}{why}")
        case ev.TimerSet():
            return (
                f"timer {e.timer_id} set for {format_time(e.wake_at)} "
                f"(in {_duration(e.wake_at - rec.at)})"
            )
        case ev.TimerFired():
            return f"timer {e.timer_id} fired"
        case ev.SignalAwaited():
            until = f" until timer {e.timer_id}" if e.timer_id else ""
            return f"waiting for signal {e.signal!r}{until}"
        case ev.SignalReceived():
            sender = f" from {e.sender}" if e.sender else ""
            return f"signal {e.signal!r}{sender}: {preview(e.payload, 48)}"
        case ev.Escalated():
            where = f" [{_call(e.tool, e.index or 0, e.key or '-')}]" if e.tool else ""
            return f"ESCALATED to a person{where}: {e.reason}"
        case ev.EscalationResolved():
            key = f" for key {e.key}" if e.key else ""
            return f"resolved as {e.resolution} by {e.by}{key}"
        case ev.RetryScheduled():
            return (
                f"{_call(e.tool, e.index, e.key)} attempt {e.attempt} in "
                f"{_duration(e.delay_s)} (timer {e.timer_id})"
            )
        case ev.RunDeadLettered():
            where = f" in step {e.step}" if e.step else ""
            return f"run DEAD{where}, waiting for an operator: {e.reason}"
        case ev.RunResumed():
            at = f" at step {e.step}" if e.step else ""
            return f"run resumed{at} by {e.by}"
        case ev.SignalIgnored():
            return f"control signal {e.signal!r} ignored: {e.reason}"
        case ev.RunCompleted():
            taint = f" [shaped by untrusted content from {', '.join(e.tainted_by)}]" \
                if e.tainted_by else ""
            return f"run completed: {preview(e.result)}{taint}"
        case ev.RunFailed():
            where = f" in step {e.step}" if e.step else ""
            return f"run FAILED{where}: {e.reason}"
        case ev.RunCancelled():
            why = f": {e.reason}" if e.reason else ""
            return f"run cancelled by {e.by}{why}"
        case ev.PolicyDecided():
            rule = f" (rule {e.rule_id}, policy {e.policy_version})" if e.rule_id else ""
            return f"policy: {e.decision} {_call(e.tool, e.index, e.key)}{rule}"
        case ev.ToolRefused():
            return f"{_call(e.tool, e.index, e.key)} REFUSED ({e.cause}): {e.reason}"
        case ev.ApprovalRequested():
            role = f" by a {e.required_role}" if e.required_role else ""
            return (
                f"APPROVAL needed{role} for {e.tool} {preview(e.args, 48)} "
                f"(expires {format_time(e.expires_at)})"
            )
        case ev.ApprovalGranted():
            return f"approval {e.request_id} GRANTED by {e.approver_id} (signature verified)"
        case ev.ApprovalRejected():
            return f"approval {e.request_id} REJECTED by {e.approver_id}"
        case ev.ApprovalInvalid():
            who = f" from {e.approver_id}" if e.approver_id else ""
            return f"decision{who} REFUSED: {e.reason}"
        case ev.ApprovalExpired():
            return f"approval {e.request_id} EXPIRED without a valid decision"
        case ev.EscalationAnswered():
            return f"answered by {e.approver_id}: {preview(e.answer, 48)}"
        case ev.EscalationExpired():
            return f"question {e.request_id} EXPIRED without a valid answer"
        case ev.BudgetExceeded():
            return (
                f"{e.scope} BUDGET {e.metric} would be exceeded (limit {e.limit:g}, would "
                f"reach {e.used:g}); run will {e.action}"
            )
        case ev.ToolShadowed():
            return f"shadow: {e.tool} {preview(e.args, 48)} not executed ({e.decision})"
        case ev.PlanCreated():
            return f"plan: {'; '.join(e.plan)[:120]}"
        case ev.PlanRevised():
            why = f" ({e.reason})" if e.reason else ""
            return f"plan revised{why}: {'; '.join(e.plan)[:100]}"
        case ev.ToolSelected():
            taint = f" [context holds untrusted content from {', '.join(e.tainted)}]" \
                if e.tainted else ""
            return f"agent chose {e.tool} {preview(e.args, 48)}{taint}"
        case ev.ChildStarted():
            detached = " (detached)" if e.detached else ""
            return f"child run {e.run_id} of flow {e.flow} started{detached}, key {e.key}"
        case ev.ChildAwaited():
            return f"waiting for child run {e.run_id}"
        case ev.ChildFinished():
            how = preview(e.result, 48) if e.status == "completed" else str(e.error)
            taint = f" [shaped by untrusted content from {', '.join(e.tainted_by)}]" \
                if e.tainted_by else ""
            return f"child run {e.run_id} {e.status.upper()}: {how}{taint}"
        case ev.CheckpointRefused():
            at = f" at seq {e.checkpoint_seq}" if e.checkpoint_seq is not None else ""
            return f"checkpoint{at} REFUSED, state folded from the journal: {e.reason}"
        case ev.PayloadPurged():
            kept = ", ".join(f"{k} {preview(v, 40)}" for k, v in sorted(e.kept.items())
                             if v is not None and v != "" and k not in _NOISE)
            return f"{ev.PURGED} ({purged_by}){': ' + kept if kept else ''}"
    return preview(e.model_dump(mode="json"))


def type_of(event: ev.Event) -> str:
    """The type a timeline shows for ``event``: a purged or sealed one's own."""
    if isinstance(event, ev.PayloadPurged | ev.Encrypted):
        return event.event_type
    return type(event).__name__


def duration(seconds: float) -> str:
    """A duration for people: ``9.06µs``, ``12.3ms``, ``4.56s``, ``3.2m``, ``1.5h``, ``2.1d``."""
    if 0 < seconds < 0.001:
        return f"{seconds * 1e6:.3g}µs"
    if seconds < 1:
        return f"{seconds * 1000:.3g}ms"
    return _duration(seconds)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g}s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g}h"
    return f"{seconds / 86400:.3g}d"


def lines(records: Sequence[Recorded], *, purged_by: str = "retention") -> list[Line]:
    """The timeline lines of ``records``.

    A step started again says why: after an interruption (a crash, a takeover, a lost
    lease; :mod:`underway.journal.attempts`), or continuing after what it waited for. An
    outcome journaled only after its step was interrupted and started again (found by
    ``reconcile``, retried, or resolved by a person) says so.

    Args:
        records: The run's events.
        purged_by: What purged the run's payloads, said on each purged event's line
            (``retention``, or ``erased on request``).
    """
    out = []
    open_intents: set[str] = set()
    interrupted: set[str] = set()
    resumed_by: str | None = None
    attempts = Attempts()
    for r in records:
        e = r.event
        summary = summarize(r, purged_by=purged_by)
        again = attempts.see(type_of(e))
        if isinstance(e, ev.ToolStarted):
            open_intents.add(e.key)
        elif isinstance(e, ev.StepStarted):
            interrupted |= open_intents
            if again:
                summary += " (again after an interruption)"
            elif e.attempt > 1 and resumed_by is not None:
                # Not a crash: the step suspended on purpose and runs again now.
                summary += f" (continues after {resumed_by})"
            resumed_by = None
        elif isinstance(e, _OUTCOMES):
            open_intents.discard(e.key)
            if e.key in interrupted:
                interrupted.discard(e.key)
                summary += " (outcome of the interrupted call, settled on resume)"
        elif isinstance(e, ev.StepCompleted):
            open_intents.clear()
            interrupted.clear()
        if type(e) in _RESUMERS:
            resumed_by = _RESUMERS[type(e)]
        out.append(Line(r.seq, r.at, type_of(e), summary))
    return out


_RESUMERS: dict[type[ev.Event], str] = {
    ev.ApprovalGranted: "the approval", ev.ApprovalRejected: "the rejection",
    ev.ApprovalExpired: "the approval expired", ev.EscalationAnswered: "the answer",
    ev.EscalationExpired: "the question expired",
    ev.EscalationResolved: "the resolution", ev.TimerFired: "the retry timer",
    ev.RunResumed: "an operator resumed it", ev.ChildFinished: "its child run ended",
    ev.SignalReceived: "the signal",
}


def counts(records: Sequence[Recorded]) -> dict[str, int]:
    """Totals over a run's events: steps, tool calls (and failures), model calls,
    signals, escalations, and steps started again after an interruption (not those that
    continue after an approval, an answer or a timer)."""
    kinds = Counter(type_of(r.event) for r in records)
    attempts = Attempts()
    for r in records:
        attempts.see(type_of(r.event))
    outcomes = [t.__name__ for t in _OUTCOMES]
    return {
        "events": len(records),
        "steps": kinds["StepCompleted"],
        "tool_calls": sum(kinds[t] for t in outcomes),
        "tool_failures": sum(kinds[t] for t in outcomes[1:]),
        "model_calls": kinds["ModelResponded"],
        "signals": kinds["SignalReceived"],
        "escalations": kinds["Escalated"],
        "interrupted_steps": attempts.interruptions,
    }
