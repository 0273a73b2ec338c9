"""The span export cursors on every backend: a cursor per run and tenant that never
moves back, and the runs handed back whose journal is past their cursor."""

from __future__ import annotations

from builders import T0, batch, create, lease_of

from underway.store import Store


def test_a_span_cursor_is_per_run_and_tenant_and_never_moves_back(store: Store) -> None:
    create(store, "r1")
    create(store, "r2")
    create(store, "r1", tenant="t2")
    assert store.span_cursor("t1", "r1") == 0
    store.advance_span_cursor("t1", "r1", 3)
    store.advance_span_cursor("t1", "r1", 2)
    assert store.span_cursor("t1", "r1") == 3
    assert store.span_cursor("t1", "r2") == 0
    assert store.span_cursor("t2", "r1") == 0


def test_unexported_runs_are_those_written_since_whose_head_is_past_their_cursor(
    store: Store
) -> None:
    create(store, "old", now=T0 - 100)
    create(store, "r1")
    create(store, "r2")
    create(store, "r3", tenant="t2")
    store.append(batch(lease_of(store, "r1"), 1, count=2, release=True, now=T0 + 1))
    store.advance_span_cursor("t1", "r2", 1)
    store.advance_span_cursor("t2", "r3", 1)
    assert store.unexported_runs(since=T0, limit=10) == [("t1", "r1")]
    store.advance_span_cursor("t1", "r1", 3)
    assert store.unexported_runs(since=T0, limit=10) == []
    assert store.unexported_runs(since=T0 - 1000, limit=10) == [("t1", "old")]
    assert store.unexported_runs(since=T0 - 1000, limit=0) == []
