"""The metrics page's chart geometry: bars proportional to their values under a round
axis top, stacked or side by side; horizontal bars longest first; an all-zero chart is
empty; values are written readably."""

from __future__ import annotations

import pytest

from underway.ops.charts import (
    BOTTOM,
    HEIGHT,
    TOP,
    Series,
    columns,
    count,
    count_ceiling,
    duration,
    duration_ceiling,
    nice_ceiling,
    rows,
    usd,
)

PLOT = HEIGHT - TOP - BOTTOM


@pytest.mark.parametrize(("value", "top"), [
    (0, 1), (0.7, 0.8), (1, 1), (3, 4), (5, 6), (7.5, 8), (9, 10), (360, 400), (0.75, 0.8),
])
def test_an_axis_top_is_round(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)


def test_counts_and_durations_have_their_own_round_tops() -> None:
    assert [count_ceiling(v) for v in (0, 1, 2, 3, 5)] == [2, 2, 2, 4, 6]
    assert [duration_ceiling(v) for v in (0, 45, 600, 1200, 3000, 5000)] == [
        1, 60, 600, 1800, 3600, 7200]
    assert duration_ceiling(9 * 86_400) == 10 * 86_400


def test_stacked_bars_sum_to_their_slot_and_sit_on_each_other() -> None:
    chart = columns(["d1", "d2"], [Series("a", "a", [1, 0]), Series("b", "b", [3, 2])],
                    stacked=True)
    assert not chart.empty
    assert [b.title for b in chart.bars] == ["d1 · a: 1", "d1 · b: 3", "d2 · b: 2"]
    a, b, c = chart.bars
    assert a.h == pytest.approx(PLOT / 4) and b.h == pytest.approx(PLOT * 3 / 4)
    assert b.y + b.h == pytest.approx(a.y)  # b sits on a
    assert a.y + a.h == pytest.approx(HEIGHT - BOTTOM) == c.y + c.h
    assert [t.label for t in chart.y_ticks] == ["0", "2", "4"]


def test_side_by_side_bars_share_their_slot() -> None:
    chart = columns(["d1"], [Series("p50", "median", [30]), Series("p90", "p90", [60])],
                    fmt=duration, ceiling=duration_ceiling)
    left, right = chart.bars
    assert right.x == pytest.approx(left.x + left.w)
    assert right.h == pytest.approx(PLOT) and left.h == pytest.approx(PLOT / 2)
    assert [t.label for t in chart.y_ticks] == ["0s", "30s", "1m"]


def test_a_chart_of_zeros_is_empty() -> None:
    assert columns(["d1", "d2"], [Series("a", "a", [0, 0])]).empty
    assert columns([], [Series("a", "a", [])]).empty
    assert rows([], cls="x").empty


def test_horizontal_bars_are_longest_first_with_their_values() -> None:
    chart = rows([("question", 1), ("budget", 3), ("deadline", 1)], cls="escalation")
    assert [t.label for t in chart.y_ticks] == ["budget", "deadline", "question"]
    assert [b.text for b in chart.bars] == ["3", "1", "1"]
    assert chart.bars[0].w == pytest.approx(3 * chart.bars[1].w, abs=0.05)


def test_values_are_written_readably() -> None:
    assert [count(v) for v in (0, 3, 2.5, 1500, 2_300_000)] == ["0", "3", "2.5", "1.5k", "2.3M"]
    assert [usd(v) for v in (0, 0.004, 0.75, 1234.5)] == ["$0", "$0.0040", "$0.75", "$1,234"]
    assert [duration(v) for v in (0, 45, 600, 5400, 2 * 86_400)] == [
        "0s", "45s", "10m", "1.5h", "2d"]
