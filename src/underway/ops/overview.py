"""A run's journal as an operator reads it at a glance: its step attempts, each with the
worker that ran it, its duration, its tool and model calls and the wait it ended in; and
the graph of the transitions it took.

Both the console's run page (a Gantt chart, a graph, one row per step attempt) and
``underway runs show`` (the same rows as text) draw from :func:`overview`. Everything is
read from the journal: times are the events' own, a tool call lasts from its intent to
its outcome (a read-only call, which journals no intent, for its recorded latency), a
model call for its recorded latency, and a wait from the event that began it to the one
that ended it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .. import events as ev
from ..client import Recorded
from .timeline import Line, lines, preview

__all__ = ["Attempt", "Call", "Edge", "Graph", "Overview", "Wait", "overview", "short_worker"]

Kind = Literal["tool", "model"]

_OUTCOMES = (ev.ToolSucceeded, ev.ToolFailed, ev.ToolTimedOut, ev.SchemaValidationFailed,
             ev.ToolOutcomeUnknown, ev.ToolRefused, ev.ToolShadowed)
_QUIET = (ev.StepStarted, ev.StepCompleted, ev.ValueRecorded, ev.VersionMarked)
"""Events the compact view folds into its row: the row itself says what they say."""
_ENDS = (ev.RunCompleted, ev.RunFailed, ev.RunCancelled, ev.RunDeadLettered)


@dataclass(frozen=True, slots=True)
class Call:
    """A tool or model call of a step attempt, from its start to its outcome."""

    kind: Kind
    name: str
    index: int
    start: float
    end: float | None
    """None: no outcome journaled (in flight, or unknown after a crash)."""
    outcome: str
    seq: int

    @property
    def label(self) -> str:
        """``tool lookup #0`` or ``model claude #1``."""
        return f"{self.kind} {self.name} #{self.index}"


@dataclass(slots=True)
class Wait:
    """What the run waited on after a step (a timer, a signal, a person, a child, a retry,
    an operator), from the event that began the wait to the one that ended it."""

    what: str
    start: float
    end: float | None = None
    """None: still waiting (or the run ended while it waited)."""
    outcome: str = ""


@dataclass(slots=True)
class Attempt:
    """One attempt of a step with every event from its start to the next attempt's: the
    worker that ran it, its calls, the wait it ended in and where it went. The first row
    of a run (``step`` empty) holds the events before its first step."""

    step: str
    attempt: int
    worker: str | None
    start: float
    first_seq: int
    last_seq: int = 0
    end: float | None = None
    """When the step's own work ended (its last event before a wait, or its completion);
    None while it runs."""
    next: str | None = None
    outcome: str = ""
    calls: list[Call] = field(default_factory=list)
    wait: Wait | None = None
    notes: list[Line] = field(default_factory=list)
    """The lines of its events the compact view shows under the row (what its row does
    not say: calls' outcomes, waits, people, children, the run's end)."""
    children: list[str] = field(default_factory=list)
    """The flows of the child runs it started."""
    again: str = ""
    """Why a later attempt ran: its start's line (``step x, attempt 2 (again after an
    interruption)``, ``... (continues after the approval)``)."""

    @property
    def title(self) -> str:
        """``step fetch`` (``, attempt 2`` past the first); ``run`` for the first row, or
        ``an earlier step`` when the events read start inside one."""
        if not self.step:
            return "run" if self.first_seq <= 1 else "an earlier step"
        if self.attempt > 1:
            return self.again or f"step {self.step}, attempt {self.attempt}"
        return f"step {self.step}"

    @property
    def took(self) -> float | None:
        """How long the step's own work took (None while it runs)."""
        return None if self.end is None else max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Edge:
    """A transition the run took: from step ``source`` to ``target`` (``end`` once it
    finished), ``count`` times, and what it waited on in between (or how it ended, when
    it did not end by finishing: ``failed``, ``dead``, ``cancelled``)."""

    source: str
    target: str
    count: int
    waits: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Graph:
    """The steps (in order: declared, else as first run) and the transitions taken."""

    steps: tuple[str, ...]
    visited: frozenset[str]
    edges: tuple[Edge, ...]
    current: str | None
    ended: str | None
    """The run's end (``completed``, ``failed``, ``cancelled``, ``dead``) or None."""
    about: dict[str, str] = field(default_factory=dict)
    """What happened in each step taken, in a few words: its attempts past the first,
    what it waited on, the children it started."""


@dataclass(frozen=True, slots=True)
class Overview:
    """A run's attempts, the workers that ran them, its span in time and its graph."""

    attempts: tuple[Attempt, ...]
    start: float
    end: float
    graph: Graph

    @property
    def workers(self) -> dict[str, int]:
        """How many step attempts each worker ran."""
        return dict(Counter(a.worker for a in self.attempts if a.worker))


def short_worker(owner: str | None) -> str:
    """A worker's owner id (``host:space:pid:start``) as people tell workers apart:
    ``host pid N`` (``-`` for None; any other form as it is)."""
    if not owner:
        return "-"
    parts = owner.split(":")
    if len(parts) == 4 and parts[2].isdigit():
        return f"{parts[0]} pid {parts[2]}"
    return owner


def _step_of(e: ev.Event) -> tuple[str, int, str | None] | None:
    """(step, attempt, worker) when ``e`` starts a step (its skeleton, once purged)."""
    if isinstance(e, ev.StepStarted):
        return e.step, e.attempt, e.worker
    if isinstance(e, ev.PayloadPurged) and e.event_type == "StepStarted":
        step, attempt, worker = e.kept.get("step"), e.kept.get("attempt", 1), e.kept.get("worker")
        return (str(step or "?"), attempt if isinstance(attempt, int) else 1,
                worker if isinstance(worker, str) else None)
    return None


def _opens(e: ev.Event) -> str | None:
    """What a run waits on once ``e`` is journaled (None: ``e`` begins no wait)."""
    match e:
        case ev.TimerSet():
            return "a timer"
        case ev.SignalAwaited():
            return f"signal {e.signal!r}"
        case ev.ChildAwaited():
            return f"child run {e.run_id}"
        case ev.ApprovalRequested():
            return f"an approval of {e.tool}" + (f" by a {e.required_role}"
                                                 if e.required_role else "")
        case ev.Escalated():
            return "a person's answer" if e.question else "a person's resolution"
        case ev.RetryScheduled():
            return f"a retry of {e.tool}"
        case ev.RunDeadLettered():
            return "an operator"
    return None


def _closes(e: ev.Event) -> str | None:
    """How a wait ended when ``e`` is journaled (None: ``e`` ends none)."""
    match e:
        case ev.TimerFired():
            return "timer fired"
        case ev.SignalReceived():
            return f"signal {e.signal!r}" + (f" from {e.sender}" if e.sender else "")
        case ev.ChildFinished():
            return f"child {e.status}"
        case ev.ApprovalGranted():
            return f"granted by {e.approver_id}"
        case ev.ApprovalRejected():
            return f"rejected by {e.approver_id}"
        case ev.ApprovalExpired() | ev.EscalationExpired():
            return "expired"
        case ev.EscalationAnswered():
            return f"answered by {e.approver_id}"
        case ev.EscalationResolved():
            return f"resolved as {e.resolution} by {e.by}"
        case ev.RunResumed():
            return f"resumed by {e.by}"
        case ev.RunCancelled():
            return f"cancelled by {e.by}"
    return None


def _quiet(e: ev.Event, settled: set[str]) -> bool:
    """Whether the compact view leaves ``e`` to its row: bookkeeping, a call's intent
    whose outcome follows, an allowed call's policy decision, a wait's own start."""
    if isinstance(e, _QUIET):
        return True
    if isinstance(e, ev.ToolStarted):
        return e.key in settled
    if isinstance(e, ev.PolicyDecided):
        return e.decision == "allow"
    return isinstance(e, ev.TimerSet | ev.SignalAwaited | ev.ChildAwaited | ev.TimerFired)


def overview(records: Sequence[Recorded], *, now: float | None = None,
             declared: Sequence[str] = (), purged_by: str = "retention") -> Overview:
    """The attempts and graph of a run's journal.

    Args:
        records: The run's events, in order (redacted as the reader may see them).
        now: The time a run that has not ended is drawn up to (None: its last event's).
        declared: The flow's steps, in order, when the reader has its code: the graph
            shows every one, taken or not.
        purged_by: What purged the run's payloads, as its lines say.
    """
    said = lines(records, purged_by=purged_by)
    settled = {r.event.key for r in records if isinstance(r.event, _OUTCOMES)}
    first_at = records[0].at if records else 0.0
    rows: list[Attempt] = [Attempt("", 0, None, first_at, records[0].seq if records else 0)]
    intents: dict[str, float] = {}
    ended: str | None = None
    for r, line in zip(records, said, strict=True):
        e = r.event
        started = _step_of(e)
        row = rows[-1]
        if started is not None:
            _close_row(row, r.at, "interrupted")
            row = Attempt(started[0], started[1], started[2], r.at, r.seq,
                          again=line.summary if started[1] > 1 else "")
            rows.append(row)
        row.last_seq = r.seq
        if not _quiet(e, settled):
            row.notes.append(line)
        _call(row, r, intents)
        if isinstance(e, ev.ChildStarted):
            row.children.append(e.flow)
        if isinstance(e, ev.StepCompleted):
            row.end, row.next = r.at, e.next
            row.outcome = f"-> {e.next or 'end'}"
        elif isinstance(e, _ENDS):
            ended = _end_name(e)
            if row.end is None:
                row.end = r.at
            row.outcome = row.outcome or ended
        what, how = _opens(e), _closes(e)
        if how is not None and row.wait is not None and row.wait.end is None:
            row.wait.end, row.wait.outcome = r.at, how
        if what is not None:
            if row.end is None and not isinstance(e, ev.RunDeadLettered):
                row.end = r.at  # the step suspends here: its work is done
                row.outcome = row.outcome or "waits"
            if row.wait is None or row.wait.end is not None:
                row.wait = Wait(what, r.at)
            elif row.wait.what == "a timer":
                row.wait.what = what  # a signal's timeout: the signal is what it waits on
        if isinstance(e, ev.RunResumed):
            ended = None  # a dead run an operator resumed moves on
    last = records[-1].at if records else 0.0
    if rows[0].last_seq == 0 and len(rows) > 1:
        rows.pop(0)
    graph = _graph(rows, declared, ended)
    # A call's start is read back from its latency: it may lie before the first event.
    start = min([first_at, *(c.start for row in rows for c in row.calls)])
    return Overview(tuple(rows), start, max(last, now or last), graph)


def _close_row(row: Attempt, at: float, why: str) -> None:
    """``row`` ends as the next attempt starts at ``at``: a wait still open ended then."""
    if row.wait is not None and row.wait.end is None:
        row.wait.end, row.wait.outcome = at, row.wait.outcome or "resumed"
    if row.step and row.end is None:
        row.outcome = row.outcome or why
        row.end = _last_own(row)


def _last_own(row: Attempt) -> float:
    """When an attempt that never finished was last heard of: its last call's end."""
    ends = [c.end for c in row.calls if c.end is not None]
    return max([row.start, *ends])


def _end_name(e: ev.Event) -> str:
    return {ev.RunCompleted: "completed", ev.RunFailed: "failed",
            ev.RunCancelled: "cancelled", ev.RunDeadLettered: "dead"}[type(e)]


def _call(row: Attempt, r: Recorded, intents: dict[str, float]) -> None:
    """Record the call ``r`` starts or settles in ``row``."""
    e = r.event
    if isinstance(e, ev.ToolStarted):
        intents[e.key] = r.at
    elif isinstance(e, ev.ModelResponded):
        start = r.at - e.latency_ms / 1000
        row.calls.append(Call("model", e.model, e.index, start, r.at,
                              f"{e.tokens_in}+{e.tokens_out} tokens", r.seq))
    elif isinstance(e, _OUTCOMES):
        latency = getattr(e, "latency_ms", 0.0) / 1000
        start = intents.pop(e.key, r.at - latency)
        row.calls.append(Call("tool", e.tool, e.index, start, r.at, _said(e), r.seq))


def _said(e: ev.Event) -> str:
    match e:
        case ev.ToolSucceeded():
            return f"ok: {preview(e.result, 40)}"
        case ev.ToolFailed():
            return f"failed: {e.error_type}"
        case ev.ToolTimedOut():
            return "timed out"
        case ev.ToolOutcomeUnknown():
            return "outcome unknown"
        case ev.ToolRefused():
            return f"refused ({e.cause})"
        case ev.ToolShadowed():
            return "shadowed"
    return "failed schema validation"


def _graph(rows: Sequence[Attempt], declared: Sequence[str], ended: str | None) -> Graph:
    order = list(dict.fromkeys(declared))
    edges: dict[tuple[str, str], tuple[int, list[str]]] = {}
    last = next((r for r in reversed(rows) if r.step), None)
    for row in rows:
        if not row.step:
            continue
        if row.step not in order:
            order.append(row.step)
        # A run that died and was resumed did not end there: only its last step ends it.
        target = row.next or "end" if row.outcome.startswith("->") else \
            "end" if row is last and row.outcome in ("completed", "failed", "cancelled",
                                                     "dead") else None
        if target is None:
            continue
        count, waits = edges.get((row.step, target), (0, []))
        said = row.wait.what if row.wait is not None and target != "end" else \
            None if row.outcome.startswith("->") else row.outcome
        if said is not None and said not in waits:
            waits.append(said)
        edges[(row.step, target)] = (count + 1, waits)
    for (_, target) in list(edges):
        if target != "end" and target not in order:
            order.append(target)
    visited = frozenset(r.step for r in rows if r.step)
    # Where the run is: the step its last attempt went on to, or that attempt's own.
    current = None if last is None or ended is not None else \
        last.next if last.outcome.startswith("->") and last.next else last.step
    return Graph(tuple(order), visited,
                 tuple(Edge(s, t, n, tuple(w)) for (s, t), (n, w) in edges.items()),
                 current, ended, _about(rows))


def _about(rows: Sequence[Attempt]) -> dict[str, str]:
    """Per step taken: ``3 attempts · an approval of refund · child helper``."""
    seen: dict[str, list[str]] = {}
    attempts: Counter[str] = Counter()
    for row in rows:
        if not row.step:
            continue
        attempts[row.step] += 1
        said = seen.setdefault(row.step, [])
        found = [row.wait.what] if row.wait is not None and row.wait.what != "a timer" else []
        for item in [*found, *(f"child {flow}" for flow in row.children)]:
            if item not in said:
                said.append(item)
    return {step: " · ".join(([f"{n} attempts"] if n > 1 else []) + seen[step])
            for step, n in attempts.items()}
