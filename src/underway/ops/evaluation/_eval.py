"""``evaluate``: how well a tenant's agents did, measured from their journals alone.

The runs measured are those created in the window (``since``, ``until``: read on the run
index's (tenant, created_at) index; ``flow`` narrows them), each as of the window's end:
what a run journaled after ``until`` is not counted, so a past window reads the same
tomorrow. What each figure means is in :mod:`underway.ops.evaluation._runs` and
docs/evaluation.md; what was read to compute them is in :attr:`Evaluation.reading`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ...errors import ConfigurationError
from ...guard.policy.defaults import UNTRUSTED_INPUT
from ...labels import LabelValue, check_key, label_filter
from ...redaction import REDACTED
from ...store.base import Store
from ...store.journal import RUN_BATCH
from ._reading import Reading, Tally, created_runs, read_facts
from ._runs import EVAL_KINDS, ModelTally, RunSummary, ToolTally, summarize
from ._stats import Spread, ratio

TAINT_RULES = frozenset({UNTRUSTED_INPUT.id})
"""The rules whose holds count as taint holds by default: the built-in rule that holds a
call proposed by a model that has read untrusted content."""


@dataclass(frozen=True, slots=True)
class Outcomes:
    """How the runs stand at the window's end."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    dead: int = 0
    open: int = 0
    """Still running, waiting or escalated."""
    tainted: int = 0
    """Completed runs whose result untrusted content shaped (``tainted_by`` not empty)."""
    tainted_by: dict[str, int] = field(default_factory=dict)
    """Those runs, by each source named in their ``tainted_by``."""
    answers_marked: int = 0
    """Completed runs whose result has marked parts (``RunCompleted.marks``: parts trusted
    sources do not account for)."""
    answers_repeating: int = 0
    """Those whose result repeats untrusted text (a mark with ``repeats``)."""
    repeated_from: dict[str, int] = field(default_factory=dict)
    """Those runs, by each source whose text their result repeats."""

    @property
    def completion_rate(self) -> float:
        """Completed runs over runs started (0 without runs)."""
        return ratio(self.completed, self.started)

    @property
    def ended(self) -> int:
        """Runs that completed, failed or were cancelled."""
        return self.completed + self.failed + self.cancelled


@dataclass(frozen=True, slots=True)
class Takeover:
    """How often a person had to step in, and who did. ``runs``: runs with an approval
    request or an escalation; ``decided_by``: who did what, how many times."""

    runs: int
    rate: float
    approvals_requested: int
    approvals_granted: int
    approvals_rejected: int
    approvals_expired: int
    approvals_invalid: int
    approvals_per_run: float
    escalations_per_run: float
    escalations: dict[str, int]
    """Escalations by cause (``unknown_outcome``, ``question``, ``budget``...)."""
    approval_wait_s: Spread
    decided_by: dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class UnsafeCall:
    """A call executed while the guard's last word on it was not a pass."""

    run_id: str
    key: str
    tool: str


@dataclass(frozen=True, slots=True)
class Safety:
    """Unsafe actions the guard stopped (``attempts``: policy denials, shadowed calls and
    taint holds) and those that ran anyway (``executed_unsafe``: the goal is 0)."""

    attempts: int
    denials: dict[str, int]
    """Calls the policy refused, by rule."""
    shadowed: int
    taint_holds: int
    refusals: dict[str, int]
    """Every refusal by the guard, by cause (a policy denial is ``policy_denied``)."""
    executed_unsafe: int
    unsafe_calls: list[UnsafeCall]


@dataclass(frozen=True, slots=True)
class Duplicate:
    """An effect key that happened more than once."""

    run_id: str
    key: str
    tool: str
    times: int


@dataclass(frozen=True, slots=True)
class Effects:
    """The effect ledger: mutating call keys, duplicates (the goal is none), outcomes that
    were lost (by how) and how they were settled."""

    mutating_keys: int
    duplicates: list[Duplicate]
    unknown_outcomes: dict[str, int]
    settled: dict[str, int]


@dataclass(frozen=True, slots=True)
class Recovery:
    """Steps taken over after their worker died or lost its lease, the time from the last
    event the interrupted attempt committed to the new attempt's start (``gap_s``), and
    dead runs: how many dead-letterings, how many operator resumes."""

    takeovers: int
    runs_taken_over: int
    gap_s: Spread
    dead_lettered: int
    resumes: int


@dataclass(frozen=True, slots=True)
class Cost:
    """What the runs spent: model cost and tokens, money moved by currency, each per
    completed run too (None without a completed run), and latencies."""

    model_calls: int
    tokens_in: int
    tokens_out: int
    model_cost_usd: float
    cost_per_completed_usd: float | None
    tokens_per_completed: float | None
    money: dict[str, float]
    money_per_completed: dict[str, float]
    model_latency_ms: Spread
    tool_latency_ms: Spread


@dataclass(frozen=True, slots=True)
class FlowFigures:
    """One flow's runs in brief; or, in :attr:`Evaluation.groups`, the runs with one value
    of a label (``flow`` holds that value)."""

    flow: str
    outcomes: Outcomes
    resolution_s: Spread
    takeover_rate: float
    unsafe_attempts: int
    executed_unsafe: int
    duplicates: int
    takeovers: int
    model_cost_usd: float
    cost_per_completed_usd: float | None
    tokens: int


@dataclass(frozen=True, slots=True)
class ToolFigures:
    """One tool's calls: outcomes, what the guard did with them, and latency."""

    tool: str
    succeeded: int
    failed: int
    timed_out: int
    unknown: int
    schema_failures: int
    refused: int
    denied: int
    held: int
    shadowed: int
    executed_unsafe: int
    duplicates: int
    latency_ms: Spread

    @property
    def executed(self) -> int:
        """Calls that ran (succeeded, failed, timed out, lost)."""
        return self.succeeded + self.failed + self.timed_out + self.unknown

    @property
    def error_rate(self) -> float:
        """Failures over calls that ran."""
        return ratio(self.failed, self.executed)


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """One model's calls: usage, cost and latency."""

    model: str
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    latency_ms: Spread


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What :func:`evaluate` measured (docs/evaluation.md explains each figure)."""

    tenant_id: str
    flow: str | None
    since: float | None
    until: float | None
    outcomes: Outcomes
    resolution_s: Spread
    """Seconds from start to end of the runs that ended (completed, failed, cancelled)."""
    takeover: Takeover
    safety: Safety
    effects: Effects
    recovery: Recovery
    cost: Cost
    flows: list[FlowFigures]
    tools: list[ToolFigures]
    models: list[ModelFigures]
    started_per_day: dict[str, dict[str, int]]
    """Runs started per UTC day (``YYYY-MM-DD``), by the status they have at the end."""
    reading: Reading
    taint_rules: tuple[str, ...] = field(default=tuple(sorted(TAINT_RULES)))
    group_by: str | None = None
    """The label the runs are grouped by (None: not grouped)."""
    groups: list[FlowFigures] = field(default_factory=list)
    """The runs of each value of label :attr:`group_by` (its text in ``flow``; ``-``: runs
    without the label), as the label stands now; a sensitive value reads ``[redacted]``."""
    labels: dict[str, str] = field(default_factory=dict)
    """Only runs with these labels were measured."""

    def to_json(self) -> dict[str, Any]:
        """Every figure as JSON-ready values (what ``underway eval --json`` prints)."""
        out = asdict(self)
        out["outcomes"]["completion_rate"] = self.outcomes.completion_rate
        for flow, flow_figures in zip(out["flows"], self.flows, strict=True):
            flow["outcomes"]["completion_rate"] = flow_figures.outcomes.completion_rate
        for tool, tool_figures in zip(out["tools"], self.tools, strict=True):
            tool["error_rate"] = tool_figures.error_rate
        for group, group_figures in zip(out["groups"], self.groups, strict=True):
            group["outcomes"]["completion_rate"] = group_figures.outcomes.completion_rate
        return out


def evaluate(
    store: Store, *, tenant_id: str = "default", flow: str | None = None,
    since: float | None = None, until: float | None = None,
    taint_rules: Iterable[str] = TAINT_RULES, group_by: str | None = None,
    labels: Mapping[str, LabelValue] | None = None,
) -> Evaluation:
    """Measure the tenant's runs from their journals.

    Args:
        store: The store.
        tenant_id: The tenant.
        flow: Only this flow's runs; None means every flow.
        since: Only runs created at or after it (epoch seconds); None means no bound.
        until: Only runs created before it (epoch seconds); None means no bound.
        taint_rules: The policy rules whose approval holds count as taint holds. By default,
            the built-in ``untrusted-input`` rule.
        group_by: Also measure the runs of each value of this label
            (:attr:`Evaluation.groups`).
        labels: Only runs with all these labels (matched by their text).
    """
    for name, value in (("since", since), ("until", until)):
        if value is not None and not math.isfinite(value):
            raise ConfigurationError(f"{name} must be a time in epoch seconds, not {value!r}")
    if since is not None and until is not None and until <= since:
        raise ConfigurationError("the window is empty: until must be after since")
    wanted = label_filter(labels)
    if group_by is not None:
        check_key(group_by, field="group_by")
    tally = Tally(EVAL_KINDS)
    rules = frozenset(taint_rules)
    run_ids = created_runs(store, tenant_id, flow=flow, since=since, until=until,
                           labels=wanted)
    summaries = [summarize(run_id, facts, until=until, taint_rules=rules)
                 for run_id, facts in read_facts(store, tenant_id, run_ids, EVAL_KINDS, tally)]
    summaries.sort(key=lambda s: (s.started_at or 0.0, s.run_id))
    found = _evaluation(tenant_id, flow, since, until, summaries, tally.done(),
                        tuple(sorted(rules)))
    groups = [] if group_by is None else _groups(store, tenant_id, group_by, summaries)
    return replace(found, group_by=group_by, groups=groups, labels=wanted)


NO_VALUE = "-"
"""The group of the runs without the label grouped by."""


def _groups(store: Store, tenant_id: str, key: str, runs: list[RunSummary]
            ) -> list[FlowFigures]:
    """The runs of each value of label ``key``, from the label index (a projection of the
    journals), a batch of runs a query."""
    values: dict[str, str] = {}
    for i in range(0, len(runs), RUN_BATCH):
        found = store.run_labels(tenant_id, [r.run_id for r in runs[i:i + RUN_BATCH]])
        for run_id, rows in found.items():
            for x in rows:
                if x.key == key:
                    values[run_id] = REDACTED if x.sensitive else x.value
    by_value: dict[str, list[RunSummary]] = defaultdict(list)
    for r in runs:
        by_value[values.get(r.run_id, NO_VALUE)].append(r)
    return [_flow(value, rs) for value, rs in sorted(by_value.items())]


def _evaluation(tenant_id: str, flow: str | None, since: float | None, until: float | None,
                runs: list[RunSummary], reading: Reading,
                taint_rules: tuple[str, ...]) -> Evaluation:
    outcomes = _outcomes(runs)
    tools: dict[str, ToolTally] = defaultdict(ToolTally)
    models: dict[str, ModelTally] = defaultdict(ModelTally)
    for r in runs:
        for name, t in r.tools.items():
            tools[name].add(t)
        for name, m in r.models.items():
            models[name].add(m)
    by_flow: dict[str, list[RunSummary]] = defaultdict(list)
    for r in runs:
        by_flow[r.flow].append(r)
    return Evaluation(
        tenant_id=tenant_id, flow=flow, since=since, until=until, outcomes=outcomes,
        resolution_s=_resolution(runs), takeover=_takeover(runs), safety=_safety(runs),
        effects=_effects(runs), recovery=_recovery(runs),
        cost=_cost(runs, outcomes, tools.values(), models.values()),
        flows=[_flow(name, rs) for name, rs in sorted(by_flow.items())],
        tools=[_tool(name, t) for name, t in sorted(tools.items())],
        models=[ModelFigures(name, m.calls, m.tokens_in, m.tokens_out, m.cost_usd,
                             Spread.of(m.latencies)) for name, m in sorted(models.items())],
        started_per_day=_per_day(runs), reading=reading, taint_rules=taint_rules,
    )


def _outcomes(runs: list[RunSummary]) -> Outcomes:
    n = Counter(r.status for r in runs)
    tainted = [r for r in runs if r.status == "completed" and r.tainted_by]
    sources = Counter(src for r in tainted for src in r.tainted_by)
    marked = [r for r in runs if r.status == "completed" and r.marks]
    repeating = [r for r in marked if any(repeats for _, repeats in r.marks)]
    repeated = Counter(src for r in repeating
                       for src in dict.fromkeys(x for srcs, rep in r.marks if rep for x in srcs))
    return Outcomes(len(runs), n["completed"], n["failed"], n["cancelled"], n["dead"],
                    n["open"], len(tainted), dict(sorted(sources.items())), len(marked),
                    len(repeating), dict(sorted(repeated.items())))


def _resolution(runs: list[RunSummary]) -> Spread:
    return Spread.of(d for r in runs if (d := r.resolution) is not None)


def _takeover(runs: list[RunSummary]) -> Takeover:
    decided: dict[str, Counter[str]] = defaultdict(Counter)
    escalations: Counter[str] = Counter()
    for r in runs:
        for (who, what), n in r.decisions.items():
            decided[who][what] += n
        escalations.update(r.escalations)
    needed = sum(1 for r in runs if r.needed_person)
    requested = sum(r.approvals_requested for r in runs)
    return Takeover(
        runs=needed, rate=ratio(needed, len(runs)), approvals_requested=requested,
        approvals_granted=sum(r.approvals_granted for r in runs),
        approvals_rejected=sum(r.approvals_rejected for r in runs),
        approvals_expired=sum(r.approvals_expired for r in runs),
        approvals_invalid=sum(r.approvals_invalid for r in runs),
        approvals_per_run=ratio(requested, len(runs)),
        escalations_per_run=ratio(sum(escalations.values()), len(runs)),
        escalations=dict(sorted(escalations.items())),
        approval_wait_s=Spread.of(w for r in runs for w in r.approval_waits),
        decided_by={who: dict(sorted(what.items())) for who, what in sorted(decided.items())},
    )


def _safety(runs: list[RunSummary]) -> Safety:
    denials: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    for r in runs:
        denials.update(r.denials)
        refusals.update(r.refusals)
    shadowed = sum(r.shadowed for r in runs)
    taint = sum(r.taint_holds for r in runs)
    unsafe = [UnsafeCall(r.run_id, key, tool) for r in runs for key, tool in r.unsafe]
    return Safety(
        attempts=sum(denials.values()) + shadowed + taint,
        denials=dict(sorted(denials.items())), shadowed=shadowed, taint_holds=taint,
        refusals=dict(sorted(refusals.items())), executed_unsafe=len(unsafe),
        unsafe_calls=unsafe,
    )


def _effects(runs: list[RunSummary]) -> Effects:
    lost: Counter[str] = Counter()
    settled: Counter[str] = Counter()
    for r in runs:
        lost.update(r.unknown_outcomes)
        settled.update(r.settled)
    return Effects(
        mutating_keys=sum(r.mutating_keys for r in runs),
        duplicates=[Duplicate(r.run_id, key, tool, n) for r in runs
                    for key, tool, n in r.duplicates],
        unknown_outcomes=dict(sorted(lost.items())), settled=dict(sorted(settled.items())),
    )


def _recovery(runs: list[RunSummary]) -> Recovery:
    gaps = [g for r in runs for g in r.takeover_gaps]
    return Recovery(
        takeovers=len(gaps), runs_taken_over=sum(1 for r in runs if r.takeover_gaps),
        gap_s=Spread.of(gaps), dead_lettered=sum(r.dead_lettered for r in runs),
        resumes=sum(r.resumes for r in runs),
    )


def _cost(runs: list[RunSummary], outcomes: Outcomes, tools: Iterable[ToolTally],
          models: Iterable[ModelTally]) -> Cost:
    model_list = list(models)
    money: dict[str, float] = defaultdict(float)
    for r in runs:
        for cur, amount in r.money.items():
            money[cur] += amount
    cost = math.fsum(m.cost_usd for m in model_list)
    tokens_in = sum(m.tokens_in for m in model_list)
    tokens_out = sum(m.tokens_out for m in model_list)
    done = outcomes.completed
    return Cost(
        model_calls=sum(m.calls for m in model_list), tokens_in=tokens_in,
        tokens_out=tokens_out, model_cost_usd=cost,
        cost_per_completed_usd=cost / done if done else None,
        tokens_per_completed=(tokens_in + tokens_out) / done if done else None,
        money={cur: float(v) for cur, v in sorted(money.items())},
        money_per_completed={cur: float(v) / done for cur, v in sorted(money.items())
                             if done},
        model_latency_ms=Spread.of(x for m in model_list for x in m.latencies),
        tool_latency_ms=Spread.of(x for t in tools for x in t.latencies),
    )


def _flow(name: str, runs: list[RunSummary]) -> FlowFigures:
    outcomes = _outcomes(runs)
    cost = math.fsum(r.cost_usd for r in runs)
    return FlowFigures(
        flow=name, outcomes=outcomes, resolution_s=_resolution(runs),
        takeover_rate=ratio(sum(1 for r in runs if r.needed_person), len(runs)),
        unsafe_attempts=sum(sum(r.denials.values()) + r.shadowed + r.taint_holds
                            for r in runs),
        executed_unsafe=sum(len(r.unsafe) for r in runs),
        duplicates=sum(len(r.duplicates) for r in runs),
        takeovers=sum(len(r.takeover_gaps) for r in runs), model_cost_usd=cost,
        cost_per_completed_usd=cost / outcomes.completed if outcomes.completed else None,
        tokens=sum(r.tokens for r in runs),
    )


def _tool(name: str, t: ToolTally) -> ToolFigures:
    return ToolFigures(
        tool=name, succeeded=t.succeeded, failed=t.failed, timed_out=t.timed_out,
        unknown=t.unknown, schema_failures=t.schema_failures, refused=t.refused,
        denied=t.denied, held=t.held, shadowed=t.shadowed,
        executed_unsafe=t.executed_unsafe, duplicates=t.duplicates,
        latency_ms=Spread.of(t.latencies),
    )


def _per_day(runs: list[RunSummary]) -> dict[str, dict[str, int]]:
    days: dict[str, Counter[str]] = defaultdict(Counter)
    for r in runs:
        if r.started_at is not None:
            day = datetime.fromtimestamp(r.started_at, UTC).strftime("%Y-%m-%d")
            days[day][r.status] += 1
    return {day: dict(sorted(n.items())) for day, n in sorted(days.items())}

