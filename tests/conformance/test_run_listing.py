"""Listing runs on every backend: filters, the (created_at, run_id) cursor, id prefixes."""

from __future__ import annotations

import pytest

import underway as uw
import underway.events as ev
from underway.journal import Journal
from underway.store import Store
from underway.store.base import AppendBatch, RunUpdate

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


def updated(store: Store, run_id: str, at: float) -> None:
    """Move a run's ``updated_at`` as a worker's append would (lease, append, release)."""

    [lease] = store.claim(owner="w", now=at, ttl=60, run_id=run_id)
    row = store.get_run("default", run_id)
    assert row is not None
    blobs: dict[str, bytes] = {}
    events = Journal(store).encode(
        "default", run_id, [(row.last_seq + 1, at, ev.StepStarted(step="a"))], row.last_hash,
        blobs,
    )
    store.append(AppendBatch(
        tenant_id="default", run_id=run_id, expected_seq=row.last_seq, fence=lease.token,
        events=events, now=at, update=RunUpdate("ready", "a", None), blobs=blobs,
        release=True,
    ))


@pytest.mark.parametrize(("query", "expected"), [
    ({"updated_since": T0 + 5}, ["c", "b"]),
    ({"updated_until": T0 + 5}, ["a"]),
    ({"updated_since": T0 + 5, "updated_until": T0 + 9}, ["b"]),
    ({"search": "inv"}, ["c", "a"]),
    ({"search": "ship"}, ["b"]),
    ({"search": "b"}, ["b"]),
    ({"search": "%"}, []),
    ({"search": "_"}, []),
    ({"search": "ship", "updated_since": T0 + 9}, []),
])
def test_updated_range_and_text_search(store: Store, query: dict[str, object],
                                       expected: list[str]) -> None:
    started(store, ("a", T0, "invoice"), ("b", T0 + 1, "shipping"), ("c", T0 + 2, "invoice"))
    updated(store, "b", T0 + 5)
    updated(store, "c", T0 + 9)
    assert ids(store, **query) == expected


def test_the_client_pages_with_the_new_filters(store: Store) -> None:
    started(store, ("a", T0, "invoice"), ("b", T0 + 1, "shipping"), ("c", T0 + 2, "invoice"))
    updated(store, "c", T0 + 9)
    client = uw.Client(store)
    page = client.list_runs(search="inv", limit=1)
    assert [r.run_id for r in page.runs] == ["c"]
    rest = client.list_runs(search="inv", limit=1, cursor=page.next_cursor)
    assert [r.run_id for r in rest.runs] == ["a"] and rest.next_cursor is None
    assert [r.run_id for r in client.list_runs(updated_since=T0 + 9).runs] == ["c"]
    assert [r.run_id for r in client.list_runs(updated_until=T0 + 9).runs] == ["b", "a"]
    assert [e.seq for e in client.events("c", after=1)] == [2]
    assert client.events("a", after=1) == []


def test_run_counts_group_every_tenants_runs_by_status(store: Store) -> None:
    assert store.run_counts() == []
    started(store, ("a", T0, "f"), ("b", T0, "f"))
    uw.Client(store, clock=uw.ManualClock(T0)).start("f", {}, run_id="c", tenant_id="acme")
    assert store.run_counts() == [("acme", "ready", 1), ("default", "ready", 2)]
