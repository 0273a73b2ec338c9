"""Eager start on every backend: ``start_leased`` creates a run and leases it in one
transaction, by the rules a claim of that run would follow — an idempotent repeat finds
the run and never takes a lease someone holds, a run not yet due or over its queue's
limits is created and left for a claim, fencing tokens stay unique."""

from __future__ import annotations

import functools

import pytest
from builders import T0, WAIT_GO, batch, claim, event, lease_of, race, seqs, signal, start
from store_backends import Backend

from underway.errors import ConflictError, FencedError
from underway.store import NewRun, QueueConfig, RunUpdate, StartedRun, Store


def new(
    run_id: str = "r1", *, key: str | None = None, wake: float = T0, queue: str = "default",
    tenant: str = "t1",
) -> NewRun:
    return NewRun(
        tenant_id=tenant, run_id=run_id, flow="f", idempotency_key=key,
        first_event=event(1, run_id, "RunStarted"), blobs={"b1": b"blob"}, step="start",
        now=T0, next_wake_at=wake, queue=queue,
    )


def started(
    store: Store, n: NewRun, *, owner: str = "w1", now: float = T0, ttl: float = 30.0,
    queues: list[str] | None = None,
) -> StartedRun:
    return store.start_leased(n, owner=owner, now=now, ttl=ttl, queues=queues)


def test_a_run_is_created_and_leased_in_one_call(store: Store) -> None:
    got = started(store, new())
    assert got.created and got.lease is not None and not got.inbox
    assert (got.lease.run_id, got.lease.owner, got.lease.token, got.lease.expires_at) == (
        "r1", "w1", 1, T0 + 30)
    row = store.get_run("t1", "r1")
    assert row == got.run
    assert (row.lease_owner, row.lease_token, row.status, row.last_seq) == ("w1", 1, "ready", 1)
    assert seqs(store) == [1]
    assert store.get_blobs("t1", ["b1"]) == {"b1": b"blob"}
    assert store.claim(owner="w2", now=T0 + 29, ttl=30) == []
    # The lease is a claim's: the holder appends, fenced by its token.
    store.append(batch(got.lease, 1))
    assert seqs(store) == [1, 2]


def test_an_idempotent_repeat_returns_the_run_and_leaves_a_held_lease_alone(
    store: Store,
) -> None:
    first = started(store, new("r1", key="k"))
    again = started(store, new("r2", key="k"), owner="w2", now=T0 + 5)
    assert first.created and first.lease is not None
    assert not again.created and again.lease is None
    assert again.run.run_id == "r1" and again.run.lease_owner == "w1"
    assert store.get_run("t1", "r2") is None
    row = store.get_run("t1", "r1")
    assert row is not None and (row.lease_owner, row.lease_token) == ("w1", 1)


def test_a_repeat_after_the_lease_expired_takes_it_over_with_a_new_token(store: Store) -> None:
    first = started(store, new("r1", key="k"), ttl=10)
    again = started(store, new("r2", key="k"), owner="w2", now=T0 + 11)
    assert first.lease is not None and again.lease is not None and not again.created
    assert (again.lease.run_id, again.lease.owner, again.lease.token) == ("r1", "w2", 2)
    with pytest.raises(FencedError):
        store.append(batch(first.lease, 1, now=T0 + 12))
    store.append(batch(again.lease, 1, now=T0 + 12))
    assert seqs(store) == [1, 2]


def test_a_repeat_of_a_finished_or_waiting_run_leases_nothing(store: Store) -> None:
    done = started(store, new("done", key="d"))
    assert done.lease is not None
    store.append(batch(done.lease, 1, update=RunUpdate("completed", None, None), release=True))
    parked = started(store, new("parked", key="p"))
    assert parked.lease is not None
    store.append(batch(parked.lease, 1, update=WAIT_GO, release=True))
    assert started(store, new("x", key="d"), now=T0 + 5).lease is None
    assert started(store, new("y", key="p"), now=T0 + 5).lease is None


def test_a_run_not_yet_due_is_created_and_not_leased(store: Store) -> None:
    got = started(store, new(wake=T0 + 60))
    assert got.created and got.lease is None and got.run.lease_owner is None
    assert claim(store, now=T0 + 59) == []
    [later] = claim(store, now=T0 + 60)
    assert (later.run_id, later.token) == ("r1", 1)


def test_a_run_of_a_queue_the_starter_does_not_serve_is_left_for_its_workers(
    store: Store,
) -> None:
    got = started(store, new(queue="mail"), queues=["llm"])
    assert got.created and got.lease is None
    assert [x.run_id for x in claim(store, queues=["mail"])] == ["r1"]
    assert started(store, new("r2", queue="mail"), queues=["mail"]).lease is not None


def test_an_existing_run_id_is_a_conflict_and_its_lease_is_untouched(store: Store) -> None:
    start(store, "r1", tenant="t1")
    held = lease_of(store, "r1", owner="w0", ttl=5)
    with pytest.raises(ConflictError):
        started(store, new("r1"), now=T0 + 10)
    row = store.get_run("t1", "r1")
    assert row is not None and (row.lease_owner, row.lease_token) == ("w0", held.token)


def test_a_full_queue_gets_its_run_created_not_leased(store: Store) -> None:
    store.set_queue(QueueConfig("q", max_concurrency=1))
    assert started(store, new("a", queue="q")).lease is not None
    got = started(store, new("b", queue="q"))
    assert got.created and got.lease is None
    assert claim(store, owner="w2", queues=["q"]) == []


def test_a_rate_limited_start_spends_a_token_as_a_claim_would(store: Store) -> None:
    store.set_queue(QueueConfig("q", rate_limit=1, rate_period_s=60))
    assert started(store, new("a", queue="q"), ttl=300).lease is not None
    assert started(store, new("b", queue="q")).lease is None
    assert claim(store, owner="w2", queues=["q"]) == []
    [later] = claim(store, owner="w2", queues=["q"], now=T0 + 61)
    assert later.run_id == "b"


def test_signals_sent_before_the_run_existed_are_reported(store: Store) -> None:
    store.send_signal(signal("underway.cancel", "c1", run_id="r1"))
    got = started(store, new("r1"))
    assert got.lease is not None and got.inbox
    assert not started(store, new("r2")).inbox


def test_racing_starters_with_one_key_make_one_run_and_one_lease(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    for i in range(5):
        results = race(functools.partial(started, a, new(f"a{i}", key=f"k{i}"), owner="a"),
                       functools.partial(started, b, new(f"b{i}", key=f"k{i}"), owner="b"))
        assert all(isinstance(r, StartedRun) for r in results)
        assert sum(r.created for r in results) == 1
        assert len({r.run.run_id for r in results}) == 1
        leases = [r.lease for r in results if r.lease is not None]
        assert len(leases) == 1 and leases[0].token == 1
