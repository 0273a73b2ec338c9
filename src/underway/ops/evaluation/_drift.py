"""``measure_drift``: whether the agents behave now as they did before, from their journals.

A recent **window** (default the last day) is compared with the **baseline** before it
(default the 30 days before the window). Each event counts in the period its own time falls
in; a task (a run) counts in the period it completed in, with everything it spent over its
whole life. The metrics:

=======================  ===========================================================  ========
metric                   what                                                         moved if
=======================  ===========================================================  ========
``tool_error_rate``      tool calls that failed over calls that ran (and per tool)    ± 0.05
``tool_timeout_rate``    tool calls that timed out over calls that ran (and per tool) ± 0.02
``schema_failure_rate``  calls whose arguments or result failed the tool's schema,    ± 0.02
                         over calls attempted
``policy_denial_rate``   calls the policy denied over calls it decided                ± 0.05
``approval_rate``        calls the policy held for approval over calls it decided     ± 0.05
``tool_choice``          the model's choice of tool (``ToolSelected``): total         ≥ 0.15
                         variation distance between the two distributions
``tokens_per_task``      model tokens per completed run                               ± 25 %
``cost_per_task``        model cost per completed run                                 ± 25 %
=======================  ===========================================================  ========

A metric **drifted** when it moved at least its threshold (rates: an absolute difference;
``tool_choice``: the distance; per task: a relative change) *and* the move is unlikely to
be noise: the two periods' samples each hold at least ``min_samples`` (calls, decisions,
choices or tasks; else the metric is reported as ``too_few``) and a test of "no change"
gives a p-value under ``alpha`` (two proportions: a z-test; two distributions: a
chi-square test; means: Welch's test).

What it reads: the ids of the runs written since the baseline began (or leased now), on
the run index's (tenant, updated_at) index, and their events of :data:`DRIFT_KINDS` only,
opened without resolving blobs (:mod:`underway.ops.evaluation._reading`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...errors import ConfigurationError
from ...store.base import Store
from ._reading import Fact, Reading, Tally, read_facts
from ._stats import ratio, total_variation, two_distributions, two_means, two_proportions

DRIFT_KINDS = (
    "RunStarted", "RunCompleted", "ToolSucceeded", "ToolFailed", "ToolTimedOut",
    "ToolOutcomeUnknown", "SchemaValidationFailed", "PolicyDecided", "ToolSelected",
    "ModelResponded",
)
"""The kinds of event drift reads."""

DEFAULT_THRESHOLDS: dict[str, float] = {
    "tool_error_rate": 0.05,
    "tool_timeout_rate": 0.02,
    "schema_failure_rate": 0.02,
    "policy_denial_rate": 0.05,
    "approval_rate": 0.05,
    "tool_choice": 0.15,
    "tokens_per_task": 0.25,
    "cost_per_task": 0.25,
}
"""How far each metric must move to count (see the module's docstring for the units)."""

DEFAULT_MIN_SAMPLES = 30
"""The fewest calls, decisions, choices or tasks each period needs for a metric to be
judged."""

DEFAULT_ALPHA = 0.01
"""The p-value under which a move is taken for a real one."""

Kind = Literal["rate", "distance", "relative"]
Status = Literal["drifted", "steady", "too_few"]


@dataclass(frozen=True, slots=True)
class DriftMetric:
    """One metric in the two periods: its values (None when there is nothing to count),
    the sizes of their samples, the change (a rate's difference, the distance, or the
    relative change), the threshold, the p-value of "no change" and the verdict."""

    name: str
    tool: str | None
    """The tool a per-tool rate is about (None: all tools)."""
    kind: Kind
    baseline: float | None
    window: float | None
    baseline_n: int
    window_n: int
    change: float | None
    threshold: float
    p_value: float | None
    status: Status

    @property
    def label(self) -> str:
        """The metric's name, with its tool when it is about one."""
        return self.name if self.tool is None else f"{self.name}[{self.tool}]"


@dataclass(frozen=True, slots=True)
class Drift:
    """What :func:`measure_drift` found: every metric judged, the distribution of tool
    choices in each period, and what was read."""

    tenant_id: str
    flow: str | None
    baseline_start: float
    window_start: float
    until: float
    thresholds: dict[str, float]
    min_samples: int
    alpha: float
    metrics: list[DriftMetric]
    choices_baseline: dict[str, int]
    choices_window: dict[str, int]
    reading: Reading

    @property
    def drifted(self) -> list[DriftMetric]:
        """The metrics that moved beyond their threshold."""
        return [m for m in self.metrics if m.status == "drifted"]

    def to_json(self) -> dict[str, Any]:
        """Every figure as JSON-ready values (what ``underway drift --json`` prints)."""
        return {
            "tenant_id": self.tenant_id, "flow": self.flow,
            "baseline_start": self.baseline_start, "window_start": self.window_start,
            "until": self.until, "thresholds": self.thresholds,
            "min_samples": self.min_samples, "alpha": self.alpha,
            "drifted": [m.label for m in self.drifted],
            "metrics": [{"metric": m.label, "name": m.name, "tool": m.tool, "kind": m.kind,
                         "baseline": m.baseline, "window": m.window,
                         "baseline_n": m.baseline_n, "window_n": m.window_n,
                         "change": _finite(m.change), "threshold": m.threshold,
                         "p_value": m.p_value, "status": m.status} for m in self.metrics],
            "choices": {"baseline": self.choices_baseline, "window": self.choices_window},
            "read": {"runs": self.reading.runs, "events": self.reading.events,
                     "payload_bytes": self.reading.payload_bytes,
                     "blobs": self.reading.blobs, "kinds": list(self.reading.kinds),
                     "seconds": self.reading.seconds,
                     "unreadable": list(self.reading.unreadable)},
        }


@dataclass(slots=True)
class _Period:
    """What one period counted."""

    executed: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    timed_out: Counter[str] = field(default_factory=Counter)
    schema: int = 0
    attempted: int = 0
    decided: set[str] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)
    choices: Counter[str] = field(default_factory=Counter)
    tokens: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)


def measure_drift(
    store: Store, *, until: float, tenant_id: str = "default", flow: str | None = None,
    window: float = 86_400.0, baseline: float = 30 * 86_400.0,
    thresholds: Mapping[str, float] | None = None, min_samples: int = DEFAULT_MIN_SAMPLES,
    alpha: float = DEFAULT_ALPHA,
) -> Drift:
    """Compare the ``window`` seconds before ``until`` with the ``baseline`` seconds before that.

    Args:
        store: The store.
        until: The end of the window (epoch seconds).
        tenant_id: The tenant whose runs are compared.
        flow: Only this flow's runs; None means every flow.
        window: The recent period, in seconds.
        baseline: The period before it, in seconds.
        thresholds: Override :data:`DEFAULT_THRESHOLDS`, by metric name.
        min_samples: The fewest samples each period must hold for a metric to be judged.
        alpha: The p-value a move must fall under to count as drift.
    """
    limits = _thresholds(thresholds)
    _check(until=until, window=window, baseline=baseline, min_samples=min_samples,
           alpha=alpha)
    window_start = until - window
    baseline_start = window_start - baseline
    tally = Tally(DRIFT_KINDS)
    periods = (_Period(), _Period())
    run_ids = store.runs_written(tenant_id, since=baseline_start, until=until)
    if flow is not None:
        run_ids = _of_flow(store, tenant_id, run_ids, flow, tally)
    for _, facts in read_facts(store, tenant_id, run_ids, DRIFT_KINDS, tally):
        _count(facts, periods, baseline_start, window_start, until)
    before, after = periods
    return Drift(
        tenant_id=tenant_id, flow=flow, baseline_start=baseline_start,
        window_start=window_start, until=until, thresholds=limits, min_samples=min_samples,
        alpha=alpha, metrics=_judge(before, after, limits, min_samples, alpha),
        choices_baseline=dict(sorted(before.choices.items())),
        choices_window=dict(sorted(after.choices.items())), reading=tally.done(),
    )


def _thresholds(given: Mapping[str, float] | None) -> dict[str, float]:
    limits = dict(DEFAULT_THRESHOLDS)
    for name, value in (given or {}).items():
        if name not in limits:
            raise ConfigurationError(
                f"no drift metric {name!r}; the metrics are {', '.join(limits)}")
        if not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"the threshold of {name} must be a positive number, "
                                     f"not {value!r}")
        limits[name] = float(value)
    return limits


def _check(*, until: float, window: float, baseline: float, min_samples: int,
           alpha: float) -> None:
    if not math.isfinite(until):
        raise ConfigurationError(f"until must be a time in epoch seconds, not {until!r}")
    for name, value in (("window", window), ("baseline", baseline)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"the {name} must be a positive duration, not {value!r}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ConfigurationError(f"min_samples must be a whole number of at least 1, not "
                                 f"{min_samples!r}")
    if not 0 < alpha < 1:
        raise ConfigurationError(f"alpha must be between 0 and 1, not {alpha!r}")


def _of_flow(store: Store, tenant_id: str, run_ids: list[str], flow: str,
             tally: Tally) -> list[str]:
    """The runs of ``run_ids`` whose journal says they are of ``flow``: their first event
    read alone, a batch of runs a query (its events count in ``tally``; its runs are
    counted again when their other events are read)."""
    found = [run_id for run_id, facts in read_facts(store, tenant_id, run_ids,
                                                    ("RunStarted",), tally)
             if facts and facts[0].text("flow") == flow]
    tally.runs = 0
    return found


def _count(facts: list[Fact], periods: tuple[_Period, _Period], baseline_start: float,
           window_start: float, until: float) -> None:
    def period(at: float) -> _Period | None:
        if baseline_start <= at < window_start:
            return periods[0]
        if window_start <= at < until:
            return periods[1]
        return None

    tokens, cost = 0.0, 0.0
    for f in facts:
        if f.at >= until:
            break
        t = f.type
        if t == "ModelResponded":
            tokens += f.number("tokens_in") + f.number("tokens_out")
            cost += f.number("cost_usd")
            continue
        if t == "RunStarted":
            continue
        p = period(f.at)
        if p is None:
            continue
        if t == "RunCompleted":
            p.tokens.append(tokens)
            p.cost.append(cost)
        else:
            _call(p, f)


def _call(p: _Period, f: Fact) -> None:
    t, tool = f.type, f.text("tool", "?")
    if t == "ToolSelected":
        p.choices[tool] += 1
    elif t == "PolicyDecided":
        key, decision = f.text("key"), f.text("decision")
        p.decided.add(key)
        if decision == "deny":
            p.denied.add(key)
        elif decision == "require_approval":
            p.held.add(key)
    elif t == "SchemaValidationFailed":
        p.schema += 1
        p.attempted += 1
        if f.text("where") == "result":
            p.executed[tool] += 1
    elif t == "ToolSucceeded" and f.data.get("reconciled") is True:
        return  # asked of the outside system, not run
    elif t == "ToolFailed" and f.text("error_type") == "CircuitOpen":
        return  # refused by an open circuit, not run
    else:
        p.executed[tool] += 1
        p.attempted += 1
        if t == "ToolFailed":
            p.failed[tool] += 1
        elif t == "ToolTimedOut":
            p.timed_out[tool] += 1


def _judge(a: _Period, b: _Period, limits: dict[str, float], least: int,
           alpha: float) -> list[DriftMetric]:
    def rate(name: str, tool: str | None, x1: int, n1: int, x2: int, n2: int) -> DriftMetric:
        v1 = ratio(x1, n1) if n1 else None
        v2 = ratio(x2, n2) if n2 else None
        change = None if v1 is None or v2 is None else v2 - v1
        p = two_proportions(x1, n1, x2, n2) if change is not None else None
        return _verdict(name, tool, "rate", v1, v2, n1, n2, change, limits[name], p, least,
                        alpha)

    out = [
        rate("tool_error_rate", None, sum(a.failed.values()), sum(a.executed.values()),
             sum(b.failed.values()), sum(b.executed.values())),
        rate("tool_timeout_rate", None, sum(a.timed_out.values()), sum(a.executed.values()),
             sum(b.timed_out.values()), sum(b.executed.values())),
        rate("schema_failure_rate", None, a.schema, a.attempted, b.schema, b.attempted),
        rate("policy_denial_rate", None, len(a.denied), len(a.decided), len(b.denied),
             len(b.decided)),
        rate("approval_rate", None, len(a.held), len(a.decided), len(b.held),
             len(b.decided)),
    ]
    n1, n2 = sum(a.choices.values()), sum(b.choices.values())
    distance = total_variation(a.choices, b.choices) if n1 and n2 else None
    out.append(_verdict("tool_choice", None, "distance", None, None, n1, n2, distance,
                        limits["tool_choice"],
                        two_distributions(a.choices, b.choices) if distance is not None
                        else None, least, alpha))
    for name, x, y in (("tokens_per_task", a.tokens, b.tokens),
                       ("cost_per_task", a.cost, b.cost)):
        m1 = sum(x) / len(x) if x else None
        m2 = sum(y) / len(y) if y else None
        change = None if m1 is None or m2 is None else (
            (m2 - m1) / m1 if m1 else (0.0 if m2 == 0 else math.inf))
        out.append(_verdict(name, None, "relative", m1, m2, len(x), len(y), change,
                            limits[name], two_means(x, y) if change is not None else None,
                            least, alpha))
    for tool in sorted({*a.executed, *b.executed}):
        for name, counts in (("tool_error_rate", "failed"), ("tool_timeout_rate",
                                                             "timed_out")):
            ca: Counter[str] = getattr(a, counts)
            cb: Counter[str] = getattr(b, counts)
            out.append(rate(name, tool, ca[tool], a.executed[tool], cb[tool],
                            b.executed[tool]))
    return out


def _verdict(name: str, tool: str | None, kind: Kind, v1: float | None, v2: float | None,
             n1: int, n2: int, change: float | None, threshold: float,
             p: float | None, least: int, alpha: float) -> DriftMetric:
    status: Status
    if change is None or n1 < least or n2 < least:
        status = "too_few"
    elif abs(change) >= threshold and p is not None and p < alpha:
        status = "drifted"
    else:
        status = "steady"
    return DriftMetric(name, tool, kind, v1, v2, n1, n2, change, threshold, p, status)


def _finite(value: float | None) -> float | None:
    """``value`` for JSON: None for an infinite change (from a baseline of nothing)."""
    return value if value is None or math.isfinite(value) else None
