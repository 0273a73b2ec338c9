"""A claim that ends known dead holders' leases in its own transaction, and a claim told
which run to take, on every backend: the leases it ends, the limits and conditions it
keeps, and the fence that still holds against the dead holder."""

from __future__ import annotations

import functools

import pytest
from builders import ROUNDS, T0, batch, create, lease_of, race, start
from store_backends import Backend

from underway.errors import FencedError
from underway.store import QueueConfig, Store


@pytest.mark.parametrize("told", [True, False], ids=["told-which-run", "any-run"])
def test_a_claim_ends_the_dead_holders_leases_before_it_chooses(
    store: Store, told: bool,
) -> None:
    for run_id in ("r1", "r2", "r3"):
        create(store, run_id)
    dead1 = lease_of(store, "r1", owner="dead", ttl=30)
    lease_of(store, "r2", owner="dead", ttl=30)
    lease_of(store, "r3", owner="alive", ttl=30)
    [taken] = store.claim(
        owner="w2", now=T0 + 1, ttl=30, limit=1, tenant_id="t1" if told else None,
        run_id="r1" if told else None,
        expire=[("t1", "r1", "dead"), ("t1", "r2", "dead"), ("t1", "r3", "not-its-holder")])
    assert (taken.tenant_id, taken.owner, taken.token) == ("t1", "w2", 2)
    # Every listed lease of its holder ended, the one claimed or not; a lease whose
    # holder is not the one named stays.
    assert sorted(store.held_leases(now=T0 + 1)) == sorted([
        ("t1", "r3", "alive"), ("t1", taken.run_id, "w2")])
    with pytest.raises(FencedError):
        store.append(batch(dead1, 1, now=T0 + 2))
    [other] = store.claim(owner="w3", now=T0 + 1, ttl=30)
    assert {other.run_id, taken.run_id} == {"r1", "r2"} and other.token == 2


def test_a_claim_told_which_run_takes_it_only_when_a_claim_could(store: Store) -> None:
    create(store, "r1", wake=T0 + 50)  # not due yet
    create(store, "r2")
    lease_of(store, "r2", owner="alive", ttl=30)
    create(store, "r3", tenant="t2")
    for tenant, run_id in (("t1", "r1"), ("t1", "r2"), ("t1", "r3"), ("t1", "nope")):
        assert store.claim(owner="w", now=T0 + 1, ttl=30, tenant_id=tenant,
                           run_id=run_id) == []
    assert store.claim(owner="w", now=T0 + 1, ttl=30, tenant_id="t2", run_id="r3",
                       queues=["other"]) == []
    [r3] = store.claim(owner="w", now=T0 + 1, ttl=30, tenant_id="t2", run_id="r3",
                       queues=["default"])
    assert (r3.tenant_id, r3.run_id, r3.token, r3.expires_at) == ("t2", "r3", 1, T0 + 31)
    [r1] = store.claim(owner="w", now=T0 + 50, ttl=30, tenant_id="t1", run_id="r1")
    assert r1.token == 1


def test_a_claim_told_which_run_keeps_its_queues_limits(store: Store) -> None:
    store.set_queue(QueueConfig("mail", max_concurrency=1))
    store.set_queue(QueueConfig("llm", rate_limit=1, rate_period_s=3600))
    for run_id, queue in (("m1", "mail"), ("m2", "mail"), ("l1", "llm"), ("l2", "llm")):
        start(store, run_id, queue=queue)
    lease_of(store, "m1", owner="alive")
    assert store.claim(owner="w", now=T0, ttl=30, tenant_id="t1", run_id="m2") == []
    lease_of(store, "l1", owner="alive")  # the bucket's one token
    assert store.claim(owner="w", now=T0, ttl=30, tenant_id="t1", run_id="l2") == []
    # The dead holder's lease ends in the claim, which then admits the run.
    [m2] = store.claim(owner="w", now=T0, ttl=30, tenant_id="t1", run_id="m2",
                       expire=[("t1", "m1", "alive")])
    assert (m2.run_id, m2.token) == ("m2", 1)


def test_racing_takeovers_of_one_dead_lease_lease_it_once(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    for i in range(ROUNDS):
        run_id = f"r{i}"
        start(a, run_id)
        [dead] = a.claim(owner="dead", now=T0, ttl=30, tenant_id="t1", run_id=run_id)
        got = race(*(
            functools.partial(s.claim, owner=o, now=T0 + 1, ttl=30, tenant_id="t1",
                              run_id=run_id, expire=[("t1", run_id, "dead")])
            for s, o in ((a, "a"), (b, "b"))))
        won = [lease for leases in got for lease in leases]
        assert len(won) == 1 and won[0].token == dead.token + 1
        held = a.get_run("t1", run_id)
        assert held is not None and held.lease_owner == won[0].owner
        with pytest.raises(FencedError):
            a.append(batch(dead, 1, now=T0 + 2))


def test_a_claim_ends_the_dead_leases_of_runs_it_does_not_serve(store: Store) -> None:
    # On a regional store, t2 lives in another region than the claimed run.
    create(store, "r1")
    create(store, "r9", tenant="t2")
    lease_of(store, "r1", owner="dead", ttl=30)
    lease_of(store, "r9", tenant="t2", owner="dead", ttl=30)
    [taken] = store.claim(owner="w", now=T0 + 1, ttl=30, tenant_id="t1", run_id="r1",
                          expire=[("t1", "r1", "dead"), ("t2", "r9", "dead")])
    assert (taken.run_id, taken.token) == ("r1", 2)
    assert store.held_leases(now=T0 + 1) == [("t1", "r1", "w")]
