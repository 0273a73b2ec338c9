"""``measure_drift`` on seeded journals: a window that behaves as its baseline reports nothing;
a shift injected into one behaviour — tool errors, timeouts, schema failures, policy
denials, approval holds, the model's tool choices, tokens or cost per task — is reported,
and only it; too few samples are said to be too few; only the runs written since the
baseline began are read. On memory, SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from fakes.seeded_journals import SHIFTS, Behaviour, Seeder, seed_periods
from underway.errors import ConfigurationError
from underway.ops.evaluation import DEFAULT_THRESHOLDS, DRIFT_KINDS, measure_drift
from underway.store import Store

UNTIL = 1_800_000_000.0
DAY = 86_400.0
USUAL = Behaviour()


def test_a_window_that_behaves_as_its_baseline_reports_nothing(store: Store) -> None:
    seed_periods(Seeder(store), until=UNTIL, baseline=USUAL, window=USUAL)
    found = measure_drift(store, until=UNTIL)
    assert found.drifted == []
    judged = {m.label: m for m in found.metrics}
    assert set(DEFAULT_THRESHOLDS) <= set(judged)
    assert all(m.status == "steady" for m in found.metrics if m.tool is None)
    assert judged["tool_error_rate"].baseline_n == pytest.approx(2 * judged[
        "tool_error_rate"].window_n, rel=0.1)
    assert (judged["tokens_per_task"].baseline_n, judged["tokens_per_task"].window_n) == (
        80, 40)
    assert found.reading.runs == 120 and found.reading.kinds == DRIFT_KINDS


@pytest.mark.parametrize("metric", sorted(SHIFTS))
def test_a_shift_of_one_behaviour_is_reported_and_nothing_else(
        store: Store, metric: str) -> None:
    seed_periods(Seeder(store), until=UNTIL, baseline=USUAL,
                 window=USUAL.shifted(**SHIFTS[metric]))
    found = measure_drift(store, until=UNTIL)
    assert {m.name for m in found.drifted} == {metric}
    moved = next(m for m in found.drifted if m.tool is None)
    assert moved.p_value is not None and moved.p_value < found.alpha
    assert moved.change is not None and abs(moved.change) >= moved.threshold


def test_a_higher_threshold_lets_a_shift_pass(store: Store) -> None:
    seed_periods(Seeder(store), until=UNTIL, baseline=USUAL,
                 window=USUAL.shifted(**SHIFTS["tokens_per_task"]))
    assert measure_drift(store, until=UNTIL, thresholds={"tokens_per_task": 2.0}).drifted == []


def test_too_few_samples_are_not_judged(store: Store) -> None:
    seed_periods(Seeder(store), until=UNTIL, baseline=USUAL,
                 window=USUAL.shifted(**SHIFTS["tool_error_rate"]), baseline_runs=8,
                 window_runs=3)
    found = measure_drift(store, until=UNTIL, min_samples=30)
    assert found.drifted == []
    judged = {m.label: m for m in found.metrics}
    assert judged["tool_error_rate"].status == "too_few"
    assert judged["tokens_per_task"].status == "too_few"
    # With the guard lowered to what the window holds, the rate is judged — and the
    # test of no change says a handful of calls cannot tell the shift from noise.
    lowered = {m.label: m for m in measure_drift(store, until=UNTIL, min_samples=3).metrics}
    error = lowered["tool_error_rate"]
    assert error.status == "steady" and error.p_value is not None
    assert error.change is not None and error.change >= error.threshold
    assert error.p_value >= 0.01


def test_only_runs_written_since_the_baseline_began_are_read(store: Store) -> None:
    seeder = Seeder(store)
    for i in range(5):
        seeder.agent_run(UNTIL - 90 * DAY + i * 60, USUAL.shifted(error=0.9))
    seed_periods(seeder, until=UNTIL, baseline=USUAL, window=USUAL)
    found = measure_drift(store, until=UNTIL)
    assert found.reading.runs == 120 and found.drifted == []


def test_a_flow_is_measured_apart_from_the_others(store: Store) -> None:
    seed_periods(Seeder(store, flow="calm"), until=UNTIL, baseline=USUAL, window=USUAL)
    seed_periods(Seeder(store, flow="jumpy"), until=UNTIL, baseline=USUAL,
                 window=USUAL.shifted(**SHIFTS["policy_denial_rate"]))
    assert measure_drift(store, until=UNTIL, flow="calm").drifted == []
    jumpy = measure_drift(store, until=UNTIL, flow="jumpy")
    assert {m.name for m in jumpy.drifted} == {"policy_denial_rate"}
    assert jumpy.reading.runs == 120


@pytest.mark.parametrize(("options", "message"), [
    ({"thresholds": {"tool_error": 0.1}}, "no drift metric 'tool_error'"),
    ({"thresholds": {"tool_error_rate": -1.0}}, "must be a positive number"),
    ({"window": 0.0}, "window must be a positive duration"),
    ({"baseline": float("inf")}, "baseline must be a positive duration"),
    ({"min_samples": 0}, "min_samples must be a whole number"),
    ({"alpha": 1.5}, "alpha must be between 0 and 1"),
])
def test_bad_options_are_refused(store: Store, options: dict[str, object],
                                 message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        measure_drift(store, until=UNTIL, **options)  # type: ignore[arg-type]
