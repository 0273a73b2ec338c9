"""Listing runs on every backend: filters, the (created_at, run_id) cursor, id prefixes."""

from __future__ import annotations

import pytest

import underway as uw
from underway.store import Store

T0 = 1.8e9


def started(store: Store, *runs: tuple[str, float, str]) -> None:
    clock = uw.ManualClock(T0)
    client = uw.Client(store, clock=clock)
    for run_id, at, flow in runs:
        clock.t = at
        client.start(flow, {}, run_id=run_id)


def ids(store: Store, **query: object) -> list[str]:
    return [r.run_id for r in store.list_runs("default", **query)]  # type: ignore[arg-type]


def test_runs_are_listed_newest_first_with_ties_by_id(store: Store) -> None:
    started(store, ("b", T0, "f"), ("a", T0, "f"), ("c", T0 + 1, "g"))
    assert ids(store) == ["c", "a", "b"]
    assert ids(store, limit=2) == ["c", "a"]


@pytest.mark.parametrize(("query", "expected"), [
    ({"flow": "g"}, ["c"]),
    ({"since": T0 + 1}, ["c"]),
    ({"until": T0 + 1}, ["a", "b"]),
    ({"since": T0, "until": T0 + 0.5, "flow": "f"}, ["a", "b"]),
    ({"status": "ready", "flow": "h"}, []),
    ({"after": (T0 + 1, "c")}, ["a", "b"]),
    ({"after": (T0, "a")}, ["b"]),
    ({"after": (T0, "b")}, []),
    ({"id_prefix": "a"}, ["a"]),
    ({"id_prefix": ""}, ["c", "a", "b"]),
    ({"id_prefix": "%"}, []),
])
def test_filters_and_the_cursor(store: Store, query: dict[str, object],
                                expected: list[str]) -> None:
    started(store, ("b", T0, "f"), ("a", T0, "f"), ("c", T0 + 1, "g"))
    assert ids(store, **query) == expected


def test_an_id_prefix_is_matched_exactly_not_as_a_pattern(store: Store) -> None:
    started(store, ("Run_1", T0, "f"), ("runX1", T0, "f"), ("run%1", T0, "f"))
    assert ids(store, id_prefix="run") == ["run%1", "runX1"]
    assert ids(store, id_prefix="run_") == []
    assert ids(store, id_prefix="Run_") == ["Run_1"]
