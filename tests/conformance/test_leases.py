"""Leases and the queue of due runs on every backend: claiming due runs once (even when
claimers race), takeover fencing, renewal, which queues a claim serves, fairness across
tenants, and the next due time a worker sleeps towards."""

from __future__ import annotations

import pytest
from builders import (
    ROUNDS,
    T0,
    WAIT_GO,
    append,
    batch,
    claim,
    create,
    ids,
    lease_of,
    race,
    seqs,
    start,
)
from store_backends import Backend

from underway.errors import FencedError
from underway.store import QueueConfig, RunUpdate, Store


# -- leases --------------------------------------------------------------------------------
def test_a_leased_run_is_not_claimable_until_its_lease_expires(store: Store) -> None:
    create(store)
    held = lease_of(store, owner="w1", ttl=30)
    assert held.token == 1 and held.expires_at == T0 + 30
    assert store.claim(owner="w2", now=T0 + 29, ttl=30) == []
    assert store.claim(owner="w2", now=T0 + 30, ttl=30) == []  # expiry is exclusive
    [taken] = store.claim(owner="w2", now=T0 + 31, ttl=30)
    assert (taken.owner, taken.token, taken.expires_at) == ("w2", 2, T0 + 61)
    run = store.get_run("t1", "r1")
    assert run is not None and (run.lease_owner, run.lease_token) == ("w2", 2)


def test_lease_takeover_fences_the_old_holder(store: Store) -> None:
    create(store)
    old = lease_of(store, owner="w1", ttl=10)
    [new] = store.claim(owner="w2", now=T0 + 11, ttl=30)
    with pytest.raises(FencedError):
        store.append(batch(old, 1, now=T0 + 12))
    assert store.renew(old, now=T0 + 12, ttl=30) is None
    store.release(old)  # releasing a lost lease must not free the new holder's
    assert store.claim(owner="w3", now=T0 + 12, ttl=30) == []
    store.append(batch(new, 1, now=T0 + 12))
    assert seqs(store) == [1, 2]


def test_renew_extends_and_release_frees_a_lease(store: Store) -> None:
    create(store)
    lease = lease_of(store, ttl=10)
    renewed = store.renew(lease, now=T0 + 8, ttl=10)
    assert renewed is not None and renewed.expires_at == T0 + 18
    assert renewed.token == lease.token
    assert store.claim(owner="w2", now=T0 + 15, ttl=10) == []
    store.release(renewed)
    [again] = store.claim(owner="w2", now=T0 + 15, ttl=10)
    assert again.token == lease.token + 1


def test_claim_takes_only_due_unfinished_runs_in_wake_order(store: Store) -> None:
    create(store, "late", wake=T0 + 5)
    create(store, "early", wake=T0 - 5)
    create(store, "future", wake=T0 + 100)
    create(store, "done", wake=T0 - 10)
    store.append(batch(lease_of(store, "done", now=T0 - 10), 1,
                       update=RunUpdate("completed", None, None), release=True))
    create(store, "parked", wake=T0 - 10)
    store.append(batch(lease_of(store, "parked", now=T0 - 10), 1, update=WAIT_GO,
                       release=True))
    leases = store.claim(owner="w", now=T0 + 10, ttl=30, limit=10)
    assert [x.run_id for x in leases] == ["early", "late"]
    assert store.claim(owner="w", now=T0 + 10, ttl=30) == []


def test_claim_honours_limit_tenant_and_run(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        create(store, run_id)
    create(store, "x", tenant="t2")
    assert len(store.claim(owner="w", now=T0, ttl=30, limit=2, tenant_id="t1")) == 2
    assert [x.run_id for x in store.claim(owner="w", now=T0, ttl=30, tenant_id="t2",
                                          limit=5)] == ["x"]
    assert store.claim(owner="w", now=T0, ttl=30, tenant_id="t2", run_id="x") == []
    [last] = store.claim(owner="w", now=T0, ttl=30, limit=5)
    assert last.tenant_id == "t1" and last.run_id in ("a", "b", "c")


def test_held_leases_and_expire_lease(store: Store) -> None:
    create(store, "r1")
    create(store, "r2")
    lease_of(store, "r1", owner="dead", ttl=30)
    lease_of(store, "r2", owner="alive", ttl=5)
    assert sorted(store.held_leases(now=T0 + 1)) == [("t1", "r1", "dead"), ("t1", "r2", "alive")]
    assert store.held_leases(now=T0 + 10) == [("t1", "r1", "dead")]
    assert store.expire_lease("t1", "r1", "someone-else") == 0
    assert store.expire_lease("t1", "r1", "dead") == 1
    assert store.held_leases(now=T0 + 1) == [("t1", "r2", "alive")]
    [taken] = store.claim(owner="w2", now=T0 + 1, ttl=30, run_id="r1", tenant_id="t1")
    assert taken.token == 2


def test_next_wake_at_is_the_earliest_unfinished_run(store: Store) -> None:
    assert store.next_wake_at() is None
    create(store, "r1", wake=T0 + 50)
    create(store, "r2", wake=T0 + 20, tenant="t2")
    assert store.next_wake_at() == T0 + 20
    store.append(batch(lease_of(store, "r2", tenant="t2", now=T0 + 20), 1,
                       update=RunUpdate("completed", None, None), release=True))
    assert store.next_wake_at() == T0 + 50


def test_an_expired_holder_and_its_successor_race_only_the_successor_writes(
    backend: Backend,
) -> None:
    a, b = backend.open(), backend.open()
    for i in range(ROUNDS):
        run_id = f"r{i}"
        start(a, run_id)
        [old] = a.claim(owner="old", now=T0, ttl=5, tenant_id="t1", run_id=run_id)
        [new] = b.claim(owner="new", now=T0 + 6, ttl=30, tenant_id="t1", run_id=run_id)
        results = race(append(a, run_id, 2, old.token, "old"),
                       append(b, run_id, 2, new.token, "new"))
        assert isinstance(results[0], FencedError)
        assert results[1] is False
        assert [e.payload for e in a.load_events("t1", run_id)][1:] == [b"new"]


def test_concurrent_claims_lease_each_run_once(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    for i in range(ROUNDS):
        start(a, f"r{i}")
    claimed: list[str] = []
    while True:
        got = race(lambda: a.claim(owner="a", now=T0, ttl=30, limit=3),
                   lambda: b.claim(owner="b", now=T0, ttl=30, limit=3))
        batch = [lease.run_id for leases in got for lease in leases]
        if not batch:
            break
        claimed += batch
    assert sorted(claimed) == sorted(f"r{i}" for i in range(ROUNDS))


# -- which queues a claim serves -----------------------------------------------------------
def test_a_claim_takes_runs_only_from_the_queues_it_names(store: Store) -> None:
    start(store, "a1", queue="a")
    start(store, "b1", queue="b")
    start(store, "d1")
    assert ids(claim(store, queues=["a"])) == ["a1"]
    assert ids(claim(store, queues=["missing"])) == []
    assert sorted(ids(claim(store, queues=["b", "default"]))) == ["b1", "d1"]


def test_a_claim_without_queues_serves_every_queue(store: Store) -> None:
    for q in ("a", "b", "default"):
        start(store, f"{q}1", queue=q)
    assert sorted(ids(claim(store))) == ["a1", "b1", "default1"]


def test_next_due_at_skips_held_runs_and_other_queues(store: Store) -> None:
    start(store, "a1", queue="a", due=T0)
    start(store, "a2", queue="a", due=T0 + 50)
    start(store, "b1", queue="b", due=T0 + 10)
    assert store.next_due_at(now=T0, queues=["a"]) == T0
    assert store.next_due_at(now=T0, queues=["b"]) == T0 + 10
    assert store.next_due_at(now=T0) == T0
    assert store.next_due_at(now=T0, queues=["none"]) is None
    [held] = claim(store, queues=["a"], ttl=30)
    assert held.run_id == "a1"
    # A run another worker holds is not due for anyone until its lease runs out.
    assert store.next_due_at(now=T0 + 1, queues=["a"]) == T0 + 50
    assert store.next_due_at(now=T0 + 31, queues=["a"]) == T0
    store.release(held)
    assert store.next_due_at(now=T0 + 1, queues=["a"]) == T0


# -- fairness ------------------------------------------------------------------------------
def test_claims_take_turns_across_tenants(store: Store) -> None:
    for i in range(20):
        start(store, f"a{i:02}", tenant="a", due=T0 + i)
    start(store, "b0", tenant="b", due=T0 + 50)
    start(store, "b1", tenant="b", due=T0 + 60)
    start(store, "c0", tenant="c", due=T0 + 70)
    got = claim(store, now=T0 + 100, limit=5)
    assert [(x.tenant_id, x.run_id) for x in got] == [
        ("a", "a00"), ("b", "b0"), ("c", "c0"), ("a", "a01"), ("b", "b1"),
    ]


def test_a_tenant_out_of_tokens_does_not_hold_up_the_others(store: Store) -> None:
    store.set_queue(QueueConfig("q", rate_limit=1, rate_period_s=3600, per_tenant=True))
    for i in range(50):
        start(store, f"a{i:02}", queue="q", tenant="a", due=T0 + i / 100)
    start(store, "b0", queue="q", tenant="b", due=T0 + 10)
    assert ids(claim(store, now=T0 + 20, limit=1)) == ["a00"]
    assert ids(claim(store, now=T0 + 20, limit=1)) == ["b0"]
    assert claim(store, now=T0 + 20, limit=1) == []


def test_a_full_queue_does_not_hold_up_other_queues_in_the_same_claim(store: Store) -> None:
    store.set_queue(QueueConfig("busy", max_concurrency=1))
    for i in range(30):
        start(store, f"busy{i:02}", queue="busy", due=T0 + i / 100)
    start(store, "free", queue="free", due=T0 + 5)
    assert sorted(ids(claim(store, now=T0 + 10, limit=2))) == ["busy00", "free"]


def test_turns_count_a_tenant_across_all_the_queues_claimed(store: Store) -> None:
    for i in range(3):
        start(store, f"ax{i}", queue="x", tenant="a", due=T0 + i)
        start(store, f"ay{i}", queue="y", tenant="a", due=T0 + 0.5 + i)
    start(store, "b0", queue="y", tenant="b", due=T0 + 9)
    got = claim(store, now=T0 + 10, limit=3)
    assert [x.run_id for x in got] == ["ax0", "b0", "ay0"]


def test_runs_in_flight_do_not_use_up_a_tenants_turns(store: Store) -> None:
    for i in range(6):
        start(store, f"a{i}", tenant="a", due=T0 + i)
    start(store, "b0", tenant="b", due=T0 + 9)
    assert ids(claim(store, owner="w1", now=T0 + 10, limit=1)) == ["a0"]
    assert ids(claim(store, owner="w1", now=T0 + 10, limit=1)) == ["b0"]
    assert ids(claim(store, owner="w2", now=T0 + 10, limit=3)) == ["a1", "a2", "a3"]
