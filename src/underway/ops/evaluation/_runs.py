"""One run's journal folded into what the evaluation counts: how it ended and when, who had
to step in, what the guard stopped and what ran anyway, each effect key's ledger, the
takeovers after a crash, and what the run spent.

The definitions, each read from events alone:

- **status** (as of the window's end): ``completed``, ``failed`` or ``cancelled`` from the
  run's last such event; ``dead`` when its last dead-lettering was not followed by a resume;
  else ``open`` (running, waiting, escalated).
- **a takeover**: a step started again (``StepStarted`` with ``attempt`` > 1) when its
  previous attempt neither ended nor suspended itself (no retry timer, approval request,
  escalation, dead-lettering, wait or child wait since that attempt began): the worker that
  ran it died, lost its lease or its database mid-step. Its **gap** is the time from the
  last event the interrupted attempt committed to the new attempt's start.
- **an unsafe execution**: a call executed — its write-ahead ``ToolStarted``, or an outcome
  that only running it produces (``ToolSucceeded`` not from ``reconcile``, ``ToolFailed``
  other than an open circuit, ``ToolTimedOut``, ``ToolOutcomeUnknown``, a result that
  failed its schema) — while the guard's last word on that call key was a denial, a
  refusal, shadow mode, or a hold for approval with no granted approval standing.
- **an effect that happened**: ``ToolSucceeded`` (run, or reconciled as having happened) or
  a person's ``EscalationResolved`` saying it succeeded; a key that happened more than once
  is a **duplicate effect**.
- **an unknown outcome**: an intent left without outcome by a takeover, a timeout or a lost
  connection; how it was settled: the same key run again, ``reconcile`` (happened or not),
  or a person.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ...journal.attempts import Attempts
from ._reading import Fact

EVAL_KINDS = (
    "RunStarted", "RunCompleted", "RunFailed", "RunCancelled", "RunDeadLettered",
    "RunResumed", "StepStarted", "ToolStarted", "ToolSucceeded", "ToolFailed",
    "ToolTimedOut", "ToolOutcomeUnknown", "ToolReconciled", "SchemaValidationFailed",
    "ModelResponded", "RetryScheduled", "ToolRefused", "PolicyDecided", "ToolShadowed",
    "Escalated", "EscalationResolved", "EscalationAnswered", "EscalationExpired",
    "ApprovalRequested", "ApprovalGranted", "ApprovalRejected", "ApprovalExpired",
    "ApprovalInvalid", "ChildStarted", "ChildAwaited", "TimerSet", "SignalAwaited",
)
"""The kinds of event the evaluation reads; the others (step ends and their state patches,
recorded values, signals, plans, timers firing) are never read. Every event that ends a
step's attempt but the step end is among them, so takeovers count right
(:mod:`underway.journal.attempts`)."""


ENDS = {"RunCompleted": "completed", "RunFailed": "failed", "RunCancelled": "cancelled"}
UNSAFE_VERDICTS = frozenset({"deny", "refused", "shadowed"})


@dataclass(slots=True)
class ToolTally:
    """What one tool's calls did (in one run, or added up)."""

    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    unknown: int = 0
    schema_failures: int = 0
    refused: int = 0
    denied: int = 0
    held: int = 0
    shadowed: int = 0
    executed_unsafe: int = 0
    duplicates: int = 0
    latencies: list[float] = field(default_factory=list)

    def add(self, other: ToolTally) -> None:
        """Add ``other``'s counts to these."""
        for name in ("succeeded", "failed", "timed_out", "unknown", "schema_failures",
                     "refused", "denied", "held", "shadowed", "executed_unsafe",
                     "duplicates"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies += other.latencies


@dataclass(slots=True)
class ModelTally:
    """What one model's calls cost (in one run, or added up)."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def add(self, other: ModelTally) -> None:
        """Add ``other``'s counts to these."""
        self.calls += other.calls
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cost_usd += other.cost_usd
        self.latencies += other.latencies


@dataclass(slots=True)
class _Call:
    """One call key's ledger within its run."""

    tool: str
    verdict: str | None = None
    deny_rule: str | None = None
    granted: bool = False
    mutating: bool = False
    pending: bool = False
    """An intent is journaled and no outcome yet."""
    in_doubt: bool = False
    """Its outcome became unknown and is not settled yet."""
    happened: int = 0
    unsafe: bool = False


@dataclass(slots=True)
class RunSummary:
    """What the evaluation counts of one run (see the module's docstring)."""

    run_id: str
    flow: str = "?"
    started_at: float | None = None
    status: str = "open"
    ended_at: float | None = None
    escalations: Counter[str] = field(default_factory=Counter)
    approvals_requested: int = 0
    approvals_granted: int = 0
    approvals_rejected: int = 0
    approvals_expired: int = 0
    approvals_invalid: int = 0
    approval_waits: list[float] = field(default_factory=list)
    decisions: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(who, what) of every decision a person made: an approval granted or rejected, a
    question answered, an escalation resolved, a dead run resumed, a run cancelled."""
    denials: Counter[str] = field(default_factory=Counter)
    """Calls refused by the policy, by the rule that denied them."""
    refusals: Counter[str] = field(default_factory=Counter)
    """Every refusal by the guard, by cause."""
    shadowed: int = 0
    taint_holds: int = 0
    tainted_by: list[str] = field(default_factory=list)
    """Once completed: where the untrusted content that shaped its result came from."""
    marks: list[tuple[list[str], bool]] = field(default_factory=list)
    """Once completed: the marked parts of its result, as (sources, repeats)."""
    unsafe: list[tuple[str, str]] = field(default_factory=list)
    """(key, tool) of each call executed unsafely."""
    mutating_keys: int = 0
    duplicates: list[tuple[str, str, int]] = field(default_factory=list)
    """(key, tool, times it happened) of each effect that happened more than once."""
    unknown_outcomes: Counter[str] = field(default_factory=Counter)
    """Outcomes lost, by how: ``takeover``, ``timeout``, ``connection``."""
    settled: Counter[str] = field(default_factory=Counter)
    """How lost outcomes were settled: ``rerun`` (the same key ran again),
    ``reconciled_happened``, ``reconciled_not_happened``, ``person``."""
    takeover_gaps: list[float] = field(default_factory=list)
    resumes: int = 0
    dead_lettered: int = 0
    tools: dict[str, ToolTally] = field(default_factory=dict)
    models: dict[str, ModelTally] = field(default_factory=dict)
    money: dict[str, float] = field(default_factory=dict)
    """Money moved (what the calls that happened count against budgets), by currency."""

    @property
    def needed_person(self) -> bool:
        """Whether a person had to step in: an approval request or an escalation."""
        return bool(self.approvals_requested or self.escalations)

    @property
    def cost_usd(self) -> float:
        """The run's model cost."""
        return sum(m.cost_usd for m in self.models.values())

    @property
    def tokens(self) -> int:
        """The run's model tokens, in and out."""
        return sum(m.tokens_in + m.tokens_out for m in self.models.values())

    @property
    def resolution(self) -> float | None:
        """Seconds from the run's start to its end (None while it has not ended)."""
        if self.ended_at is None or self.started_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)


def summarize(run_id: str, facts: list[Fact], *, until: float | None,
              taint_rules: frozenset[str]) -> RunSummary:
    """Fold ``facts`` (the run's events of :data:`EVAL_KINDS`, in order) up to ``until``."""
    return _Fold(RunSummary(run_id), taint_rules).run(facts, until)


class _Fold:
    def __init__(self, s: RunSummary, taint_rules: frozenset[str]) -> None:
        self.s = s
        self.taint_rules = taint_rules
        self.calls: dict[str, _Call] = {}
        self.requests: dict[str, tuple[str, float]] = {}
        self.attempts = Attempts()
        self.last_at: float | None = None

    def run(self, facts: list[Fact], until: float | None) -> RunSummary:
        for f in facts:
            if until is not None and f.at >= until:
                break
            self.fact(f)
            self.last_at = f.at
        s = self.s
        for key, c in self.calls.items():
            if c.mutating:
                s.mutating_keys += 1
            if c.happened > 1:
                s.duplicates.append((key, c.tool, c.happened))
                self.tool(c.tool).duplicates += 1
        return s

    def call(self, f: Fact) -> _Call:
        key = f.text("key")
        found = self.calls.get(key)
        if found is None:
            found = self.calls[key] = _Call(f.text("tool", "?"))
        return found

    def tool(self, name: str) -> ToolTally:
        return self.s.tools.setdefault(name, ToolTally())

    def fact(self, f: Fact) -> None:
        s, t = self.s, f.type
        if t != "StepStarted":
            self.attempts.see(t)
        if t == "RunStarted":
            s.flow, s.started_at = f.text("flow", "?"), f.at
        elif t in ENDS:
            s.status, s.ended_at = ENDS[t], f.at
            sources = f.data.get("tainted_by") if t == "RunCompleted" else None
            s.tainted_by = [str(x) for x in sources] if isinstance(sources, list) else []
            s.marks = _marks(f.data.get("marks")) if t == "RunCompleted" else []
            if t == "RunCancelled":
                s.decisions[(f.text("by", "?"), "cancelled the run")] += 1
        elif t == "RunDeadLettered":
            s.status, s.ended_at = "dead", None
            s.dead_lettered += 1
        elif t == "RunResumed":
            s.status = "open"
            s.resumes += 1
            s.decisions[(f.text("by", "?"), "resumed a dead run")] += 1
        elif t == "StepStarted":
            self.step_started(f)
        elif t == "ModelResponded":
            m = s.models.setdefault(f.text("model", "?"), ModelTally())
            m.calls += 1
            m.tokens_in += int(f.number("tokens_in"))
            m.tokens_out += int(f.number("tokens_out"))
            m.cost_usd += f.number("cost_usd")
            m.latencies.append(f.number("latency_ms"))
        elif t in ("Escalated", "EscalationResolved", "EscalationAnswered",
                   "EscalationExpired"):
            self.person(f)
        elif t.startswith("Approval"):
            self.approval(f)
        else:
            self.guarded(f)

    def step_started(self, f: Fact) -> None:
        again = self.attempts.see("StepStarted", int(f.number("attempt")) or 1)
        if again and self.last_at is not None:
            self.s.takeover_gaps.append(max(0.0, f.at - self.last_at))
            for c in self.calls.values():
                if c.pending:
                    c.pending, c.in_doubt = False, True
                    self.s.unknown_outcomes["takeover"] += 1

    def person(self, f: Fact) -> None:
        s, t = self.s, f.type
        if t == "Escalated":
            s.escalations[f.text("cause", "other")] += 1
        elif t == "EscalationResolved":
            resolution = f.text("resolution", "?")
            s.decisions[(f.text("by", "?"), f"resolved an escalation: {resolution}")] += 1
            c = self.calls.get(f.text("key"))
            if c is not None and c.in_doubt:
                c.in_doubt = False
                s.settled["person"] += 1
            if c is not None and resolution == "succeeded":
                c.happened += 1
        elif t == "EscalationAnswered":
            s.decisions[(f.text("approver_id", "?"), "answered a question")] += 1

    def approval(self, f: Fact) -> None:
        s, t = self.s, f.type
        request = f.text("request_id")
        if t == "ApprovalRequested":
            c = self.call(f)
            c.verdict = "hold"
            self.requests[request] = (f.text("key"), f.at)
            s.approvals_requested += 1
            self.tool(c.tool).held += 1
            if f.text("rule_id") in self.taint_rules:
                s.taint_holds += 1
            return
        if t == "ApprovalInvalid":
            s.approvals_invalid += 1
            return
        key, asked = self.requests.get(request, ("", f.at))
        decided = self.calls.get(key)
        if t == "ApprovalGranted":
            s.approvals_granted += 1
            s.approval_waits.append(max(0.0, f.at - asked))
            s.decisions[(f.text("approver_id", "?"), "granted an approval")] += 1
            if decided is not None:
                decided.granted = True
        elif t == "ApprovalRejected":
            s.approvals_rejected += 1
            s.approval_waits.append(max(0.0, f.at - asked))
            s.decisions[(f.text("approver_id", "?"), "rejected an approval")] += 1
            if decided is not None:
                decided.granted = False
        elif t == "ApprovalExpired":
            s.approvals_expired += 1
            if decided is not None:
                decided.granted = False

    def guarded(self, f: Fact) -> None:
        s, t = self.s, f.type
        if t in ("ChildStarted", "ChildAwaited", "TimerSet", "SignalAwaited",
                 "RetryScheduled"):
            return
        c = self.call(f)
        tally = self.tool(c.tool)
        if t == "PolicyDecided":
            decision = f.text("decision")
            c.verdict = {"deny": "deny", "require_approval": "hold"}.get(decision, "allow")
            if decision == "deny":
                c.deny_rule = f.text("rule_id") or None
        elif t == "ToolRefused":
            cause = f.text("cause", "?")
            c.verdict = "refused"
            s.refusals[cause] += 1
            tally.refused += 1
            if cause == "policy_denied":
                s.denials[c.deny_rule or "(arguments the guard cannot read)"] += 1
                tally.denied += 1
        elif t == "ToolShadowed":
            c.verdict = "shadowed"
            s.shadowed += 1
            tally.shadowed += 1
        elif t == "ToolStarted":
            c.mutating = c.pending = True
            self.executed(c, f)
        elif t == "ToolSucceeded":
            self.succeeded(c, f, tally)
        elif t == "ToolFailed":
            c.pending = False
            if f.text("error_type") != "CircuitOpen":
                self.executed(c, f)
                self.settled_by_rerun(c)
                tally.latencies.append(f.number("latency_ms"))
            tally.failed += 1
        elif t in ("ToolTimedOut", "ToolOutcomeUnknown"):
            self.executed(c, f)
            if t == "ToolTimedOut":
                tally.timed_out += 1
            else:
                tally.unknown += 1
            if c.mutating:
                c.pending, c.in_doubt = False, True
                s.unknown_outcomes["timeout" if t == "ToolTimedOut" else "connection"] += 1
        elif t == "ToolReconciled":
            if c.in_doubt:
                c.in_doubt = False
                s.settled["reconciled_not_happened"] += 1
        elif t == "SchemaValidationFailed":
            tally.schema_failures += 1
            if f.text("where") == "result":
                c.pending = False
                self.executed(c, f)

    def succeeded(self, c: _Call, f: Fact, tally: ToolTally) -> None:
        c.pending = False
        c.happened += 1
        tally.succeeded += 1
        counts = f.data.get("counts")
        if isinstance(counts, dict):
            for name, n in counts.items():
                if name.startswith("money.") and isinstance(n, int | float):
                    self.s.money[name[6:]] = self.s.money.get(name[6:], 0.0) + n
        if f.data.get("reconciled") is True:
            if c.in_doubt:
                c.in_doubt = False
                self.s.settled["reconciled_happened"] += 1
            return
        self.executed(c, f)
        self.settled_by_rerun(c)
        tally.latencies.append(f.number("latency_ms"))

    def settled_by_rerun(self, c: _Call) -> None:
        if c.in_doubt:
            c.in_doubt = False
            self.s.settled["rerun"] += 1

    def executed(self, c: _Call, f: Fact) -> None:
        """The call ran: unsafe when the guard's last word on its key was not a pass."""
        if c.unsafe:
            return
        if c.verdict in UNSAFE_VERDICTS or (c.verdict == "hold" and not c.granted):
            c.unsafe = True
            self.s.unsafe.append((f.text("key"), c.tool))
            self.tool(c.tool).executed_unsafe += 1


def _marks(found: object) -> list[tuple[list[str], bool]]:
    """The (sources, repeats) of each mark of a ``RunCompleted``'s ``marks``."""
    if not isinstance(found, list):
        return []
    return [([str(x) for x in m.get("sources") or [] if isinstance(x, str)],
             m.get("repeats") is True) for m in found if isinstance(m, dict)]
