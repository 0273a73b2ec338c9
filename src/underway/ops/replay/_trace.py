"""A run's decisions, read from its journal: every tool call with its arguments, the
policy's outcome, the approval it needed, how it ended and the money it moved; model
calls and their cost; how the run ended. Built the same way from the original run and
from its replay, so the two can be set side by side."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ... import events as ev
from ...events import JSON
from ...journal.state import FINAL_STATUSES, Recorded

APPROVER = "replay"
"""The approver a replay signs the decisions it must assume as (in its own store only)."""

Approval = str
"""``requested`` (no decision journaled), ``granted``, ``rejected`` or ``expired``."""


@dataclass(slots=True)
class TracedCall:
    """One tool call of a run, as its journal tells it (in the order calls were first
    journaled). ``args`` is None when the journal holds only their hash (a read-only call
    journals no arguments); ``policy`` the policy's outcome (``allow``, ``deny``,
    ``require_approval``; None when no policy decided) and ``rule`` the rule that made
    it; ``approval`` what became of the approval it needed (None: it needed none);
    ``outcome`` ``succeeded``, ``failed``, ``refused``, ``shadowed``, ``unknown`` (an
    intent without an outcome), ``pending``, or in a replay ``stopped`` (it stopped at this
    call); ``error`` the error type of a failure or
    the cause of a refusal; ``money`` what it moved, by currency."""

    key: str
    step: str
    tool: str
    args_hash: str
    args: JSON = None
    policy: str | None = None
    rule: str | None = None
    approval: Approval | None = None
    outcome: str = "pending"
    error: str | None = None
    message: str | None = None
    result: JSON = None
    money: dict[str, float] = field(default_factory=dict)
    approver: str | None = None
    """Who decided its approval, and with what comment (a replay decides the same way,
    in the same words, since the run's next steps may read them)."""
    comment: str = ""

    @property
    def has_result(self) -> bool:
        """True when the tool ran and its result (or failure) is journaled."""
        return self.outcome in ("succeeded", "failed")


@dataclass(slots=True)
class TracedModel:
    """One model call: what was asked, what came back, its usage."""

    key: str
    request: JSON
    response: JSON
    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: float


@dataclass(slots=True)
class Waited:
    """One wait for a signal (``ctx.wait``) and how it ended in the journal: the signal it
    ``received``, or ``timed_out``; neither while it still waits."""

    signal: str
    received: ev.SignalReceived | None = None
    timed_out: bool = False


@dataclass(slots=True)
class Trace:
    """A run's decisions (see the module's docstring)."""

    run_id: str = ""
    flow: str = ""
    calls: list[TracedCall] = field(default_factory=list)
    models: list[TracedModel] = field(default_factory=list)
    values: list[tuple[str, JSON]] = field(default_factory=list)
    """Journaled values (``now``, ``uuid``, ``random``) in order."""
    versions: dict[str, bool] = field(default_factory=dict)
    """The run's answers to ``ctx.version``: change id → whether it took the new path."""
    signals: list[ev.SignalReceived] = field(default_factory=list)
    waits: list[Waited] = field(default_factory=list)
    """Every wait for a signal, in order, with how it ended."""
    cancelled: tuple[int, ev.RunCancelled] | None = None
    """When the run was cancelled: the steps it had completed then, and the cancel."""
    answers: list[tuple[JSON, str]] = field(default_factory=list)
    """Answers to the run's questions (``ctx.ask``) and who gave each, in order."""
    status: str = "ready"
    result: JSON = None
    error: str | None = None
    started: ev.RunStarted | None = None

    @property
    def finished(self) -> bool:
        """True when the run had ended."""
        return self.status in FINAL_STATUSES

    @property
    def cost_usd(self) -> float:
        """What its model calls cost."""
        return sum(m.cost_usd for m in self.models)

    @property
    def tokens(self) -> int:
        """Tokens its model calls used, in and out."""
        return sum(m.tokens_in + m.tokens_out for m in self.models)

    @property
    def money(self) -> dict[str, float]:
        """The money its calls moved, by currency."""
        total: dict[str, float] = {}
        for c in self.calls:
            for cur, amount in c.money.items():
                total[cur] = total.get(cur, 0.0) + amount
        return total

    @property
    def approvals(self) -> int:
        """How many of its calls needed an approval."""
        return sum(1 for c in self.calls if c.approval is not None)

    @classmethod
    def of(cls, records: Iterable[Recorded],
           args: Mapping[str, JSON] | None = None) -> Trace:
        """The trace of a run's decoded journal; ``args``: arguments by idempotency key,
        for calls whose journal holds only their hash."""
        t = cls()
        by_key: dict[str, TracedCall] = {}
        step = ""
        waiting: Waited | None = None
        completed = 0
        for rec in records:
            e = rec.event
            match e:
                case ev.RunStarted():
                    t.run_id, t.flow, t.started = "", e.flow, e
                case ev.StepStarted():
                    step = e.step
                case ev.StepCompleted():
                    completed += 1
                case ev.ValueRecorded():
                    t.values.append((e.kind, e.value))
                case ev.VersionMarked():
                    t.versions.setdefault(e.change_id, e.patched)
                case ev.SignalAwaited():
                    waiting = Waited(e.signal)
                    t.waits.append(waiting)
                case ev.SignalReceived():
                    t.signals.append(e)
                    if waiting is not None:
                        waiting.received, waiting = e, None
                case ev.TimerFired():
                    if waiting is not None:
                        waiting.timed_out, waiting = True, None
                case ev.EscalationAnswered():
                    t.answers.append((e.answer, e.approver_id))
                case ev.ModelResponded():
                    t.models.append(TracedModel(e.key, e.request, e.response, e.model,
                                                e.tokens_in, e.tokens_out, e.cost_usd))
                case ev.RunCompleted():
                    t.status, t.result = "completed", e.result
                case ev.RunFailed():
                    t.status, t.error = "failed", e.reason
                case ev.RunCancelled():
                    t.status, t.error, t.cancelled = "cancelled", e.reason, (completed, e)
                case ev.RunDeadLettered():
                    t.status, t.error = "dead", e.reason
                case ev.Escalated() if e.cause != "question":
                    t.status, t.error = "escalated", e.reason
                case ev.RunResumed():
                    t.status = "ready"
                case ev.EscalationResolved():
                    t.status = "ready"
                    settled = by_key.get(e.key or "")
                    if settled is not None and e.resolution == "succeeded":
                        settled.outcome, settled.result = "succeeded", e.result
                    elif settled is not None and e.resolution == "failed":
                        settled.outcome, settled.error = "failed", "EscalationResolved"
                case _:
                    _call_event(t, by_key, step, e)
        if args:
            for c in t.calls:
                if c.args is None and c.key in args:
                    c.args = args[c.key]
        return t


def _call_event(t: Trace, by_key: dict[str, TracedCall], step: str, e: ev.RunEvent) -> None:
    """Fold an event about a tool call into its :class:`TracedCall`."""
    key, tool = getattr(e, "key", None), getattr(e, "tool", None)
    if isinstance(e, ev.ApprovalGranted | ev.ApprovalRejected | ev.ApprovalExpired):
        found = by_key.get(e.request_id.split(":", 1)[-1])
        if found is not None:
            found.approval = {ev.ApprovalGranted: "granted", ev.ApprovalRejected: "rejected",
                              ev.ApprovalExpired: "expired"}[type(e)]
            if not isinstance(e, ev.ApprovalGranted):
                # The call does not run: refused as the engine folds it.
                found.outcome = "refused"
                found.error = ("approval_rejected" if isinstance(e, ev.ApprovalRejected)
                               else "approval_expired")
            if not isinstance(e, ev.ApprovalExpired):
                found.approver = e.approver_id
                comment = e.decision.get("comment") if isinstance(e.decision, dict) else ""
                found.comment = comment if isinstance(comment, str) else ""
        return
    if not isinstance(key, str) or not isinstance(tool, str) or tool in ("model", "ask"):
        return
    if not isinstance(e, ev.ToolStarted | ev.ToolSucceeded | ev.ToolFailed | ev.ToolRefused
                      | ev.ToolShadowed | ev.PolicyDecided | ev.ApprovalRequested
                      | ev.ToolTimedOut | ev.ToolOutcomeUnknown | ev.SchemaValidationFailed):
        return
    c = by_key.get(key)
    if c is None:
        c = by_key[key] = TracedCall(key, step, tool, getattr(e, "args_hash", "") or "")
        t.calls.append(c)
    args = getattr(e, "args", None)
    if args is not None and c.args is None:
        c.args = args
    match e:
        case ev.PolicyDecided():
            c.policy, c.rule = e.decision, e.rule_id
        case ev.ApprovalRequested():
            if c.approval in (None, "rejected", "expired"):
                c.approval = "requested"
        case ev.ToolStarted():
            c.outcome = "unknown"
        case ev.ToolSucceeded():
            c.outcome, c.result, c.error = "succeeded", e.result, None
            c.money = {k[6:]: float(v) for k, v in (e.counts or {}).items()
                       if k.startswith("money.")}
        case ev.ToolFailed():
            c.outcome, c.error, c.message = "failed", e.error_type, e.message
        case ev.SchemaValidationFailed():
            c.outcome, c.error = "failed", "SchemaValidationFailed"
        case ev.ToolRefused():
            c.outcome, c.error, c.message = "refused", e.cause, e.reason
        case ev.ToolShadowed():
            c.outcome = "shadowed"
        case ev.ToolTimedOut() | ev.ToolOutcomeUnknown():
            c.outcome = "unknown"
