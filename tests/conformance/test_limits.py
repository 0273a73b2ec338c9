"""Limits on every backend: queue configuration, global concurrency and rate limits on
starts (shared or per tenant) as claims apply them, and circuit breakers shared through
the store."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from builders import T0, claim, ids, start
from store_backends import Backend

from underway.errors import ConfigurationError
from underway.store import Lease, QueueConfig, Store


# -- queue configuration -------------------------------------------------------------------
def test_queue_limits_are_stored_listed_replaced_and_deleted(store: Store) -> None:
    assert store.list_queues() == []
    store.set_queue(QueueConfig("mail", max_concurrency=3))
    store.set_queue(QueueConfig("llm", rate_limit=10, rate_period_s=60, per_tenant=True))
    assert store.list_queues() == [
        QueueConfig("llm", None, 10, 60.0, True), QueueConfig("mail", 3, None, 1.0, False),
    ]
    store.set_queue(QueueConfig("mail", max_concurrency=5))
    assert store.list_queues()[1] == QueueConfig("mail", max_concurrency=5)
    assert store.delete_queue("mail") is True
    assert store.delete_queue("mail") is False
    assert [q.name for q in store.list_queues()] == ["llm"]


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"name": ""}, "needs a name"),
    ({"name": "q", "max_concurrency": -1}, "max_concurrency must be 0 or more"),
    ({"name": "q", "rate_limit": -2}, "rate_limit must be 0 or more"),
    ({"name": "q", "rate_limit": 1, "rate_period_s": 0}, "rate_period_s must be positive"),
    ({"name": "q", "per_tenant": True}, "per_tenant applies to a rate limit"),
])
def test_bad_queue_limits_are_refused_with_the_reason(
    kwargs: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        QueueConfig(**kwargs)  # type: ignore[arg-type]


# -- global concurrency --------------------------------------------------------------------
def test_a_queue_never_has_more_runs_leased_than_its_concurrency_limit(store: Store) -> None:
    store.set_queue(QueueConfig("q", max_concurrency=2))
    for i in range(5):
        start(store, f"q{i}", queue="q")
    start(store, "other", queue="other")
    first = claim(store, owner="w1")
    assert sorted(ids(first)) == ["other", "q0", "q1"]
    assert claim(store, owner="w2", queues=["q"]) == []
    store.release(first[0] if first[0].run_id != "other" else first[1])
    assert len(claim(store, owner="w2", queues=["q"])) == 1
    assert claim(store, owner="w3", queues=["q"]) == []


def test_an_expired_lease_does_not_count_against_the_limit(store: Store) -> None:
    store.set_queue(QueueConfig("q", max_concurrency=1))
    start(store, "q0", queue="q")
    start(store, "q1", queue="q")
    [held] = claim(store, owner="w1", ttl=10)
    assert claim(store, owner="w2", now=T0 + 5) == []
    # The holder died: its lease ran out, so its run and one slot are free again.
    [taken] = claim(store, owner="w2", now=T0 + 11, limit=5)
    assert taken.run_id == held.run_id and taken.token == held.token + 1


def test_a_concurrency_limit_of_zero_pauses_the_queue(store: Store) -> None:
    store.set_queue(QueueConfig("q", max_concurrency=0))
    start(store, "q0", queue="q")
    assert claim(store) == []
    store.delete_queue("q")
    assert ids(claim(store)) == ["q0"]


def test_concurrent_claimers_together_stay_within_the_limit(backend: Backend) -> None:
    stores = [backend.open() for _ in range(4)]
    stores[0].set_queue(QueueConfig("q", max_concurrency=3))
    for i in range(20):
        start(stores[0], f"q{i}", queue="q")
    for _ in range(5):
        gate = threading.Barrier(len(stores))

        def grab(s: Store, gate: threading.Barrier = gate) -> list[Lease]:
            gate.wait()
            return claim(s, owner=f"w{id(s)}", limit=2)

        with ThreadPoolExecutor(len(stores)) as pool:
            got = [lease for leases in pool.map(grab, stores) for lease in leases]
        assert len(got) == 3, got
        for lease in got:
            stores[0].release(lease)


def test_concurrent_claimers_together_start_no_more_than_the_rate_allows(
    backend: Backend,
) -> None:
    stores = [backend.open() for _ in range(4)]
    stores[0].set_queue(QueueConfig("q", rate_limit=5, rate_period_s=3600))
    for i in range(30):
        start(stores[0], f"q{i:02}", queue="q")
    gate = threading.Barrier(len(stores))

    def grab(s: Store) -> list[Lease]:
        gate.wait()
        return claim(s, owner=f"w{id(s)}", limit=3)

    with ThreadPoolExecutor(len(stores)) as pool:
        got = [lease for leases in pool.map(grab, stores) for lease in leases]
    assert len(got) == 5
    assert len({lease.run_id for lease in got}) == 5


# -- rate limits ---------------------------------------------------------------------------
def test_a_rate_limit_counts_starts_and_refills_over_its_period(store: Store) -> None:
    store.set_queue(QueueConfig("q", rate_limit=3, rate_period_s=60))
    for i in range(10):
        start(store, f"q{i:02}", queue="q", due=T0 + i / 100)

    def claim(store: Store, *, now: float) -> list[Lease]:
        return store.claim(owner="w", now=now, ttl=3600, limit=100)

    started = claim(store, now=T0 + 1)
    assert ids(started) == ["q00", "q01", "q02"]
    assert claim(store, now=T0 + 1) == []
    # Runs already started are not starts: handed back, they are claimed again freely.
    for lease in started:
        store.release(lease)
    assert sorted(ids(claim(store, now=T0 + 2))) == ["q00", "q01", "q02"]
    # One token per 20 s comes back, up to the bucket's size.
    assert ids(claim(store, now=T0 + 21)) == ["q03"]
    assert claim(store, now=T0 + 30) == []
    # (The runs claimed so far are still held: their leases last an hour.)
    assert ids(claim(store, now=T0 + 1000)) == ["q04", "q05", "q06"]


def test_a_per_tenant_rate_limit_gives_each_tenant_its_own_bucket(store: Store) -> None:
    store.set_queue(QueueConfig("q", rate_limit=2, rate_period_s=3600, per_tenant=True))
    for i in range(5):
        start(store, f"a{i}", queue="q", tenant="a", due=T0 + i)
        start(store, f"b{i}", queue="q", tenant="b", due=T0 + 10 + i)
    got = claim(store, now=T0 + 20)
    assert sorted(ids(got)) == ["a0", "a1", "b0", "b1"]
    assert claim(store, now=T0 + 20) == []


def test_a_shared_rate_limit_is_one_bucket_for_all_tenants(store: Store) -> None:
    store.set_queue(QueueConfig("q", rate_limit=2, rate_period_s=3600))
    for i in range(3):
        start(store, f"a{i}", queue="q", tenant="a", due=T0 + i)
        start(store, f"b{i}", queue="q", tenant="b", due=T0 + i)
    assert len(claim(store, now=T0 + 10)) == 2
    assert claim(store, now=T0 + 10) == []


def test_a_rate_limit_of_zero_starts_nothing_but_lets_started_runs_go_on(store: Store) -> None:
    start(store, "old", queue="q")
    [old] = claim(store)
    store.release(old)
    start(store, "new", queue="q")
    store.set_queue(QueueConfig("q", rate_limit=0))
    assert ids(claim(store, now=T0 + 1)) == ["old"]
    assert claim(store, now=T0 + 2) == []


def test_changing_a_queue_refills_its_buckets(store: Store) -> None:
    store.set_queue(QueueConfig("q", rate_limit=1, rate_period_s=3600))
    for i in range(3):
        start(store, f"q{i}", queue="q", due=T0 + i)
    assert ids(claim(store, now=T0 + 5)) == ["q0"]
    assert claim(store, now=T0 + 5) == []
    store.set_queue(QueueConfig("q", rate_limit=2, rate_period_s=3600))
    assert ids(claim(store, now=T0 + 5)) == ["q1", "q2"]


def test_limits_of_one_queue_leave_other_queues_alone(store: Store) -> None:
    store.set_queue(QueueConfig("slow", max_concurrency=1, rate_limit=1, rate_period_s=3600))
    for i in range(5):
        start(store, f"slow{i}", queue="slow", due=T0)
    for i in range(3):
        start(store, f"fast{i}", queue="fast", due=T0 + 1)
    got = claim(store, now=T0 + 2, limit=10)
    assert sorted(ids(got)) == ["fast0", "fast1", "fast2", "slow0"]


# -- circuit breakers ----------------------------------------------------------------------
def fail(store: Store, now: float, tenant: str = "*") -> None:
    store.circuit_record(tenant, "sms", ok=False, now=now, threshold=3, cooldown=30)


def test_a_circuit_opens_at_the_threshold_and_closes_on_success(store: Store) -> None:
    assert store.circuit_admit("*", "sms", now=T0, cooldown=30) == "closed"
    fail(store, T0)
    fail(store, T0)
    assert store.circuit_admit("*", "sms", now=T0, cooldown=30) == "closed"
    fail(store, T0)
    assert store.circuit_admit("*", "sms", now=T0 + 29, cooldown=30) == "open"
    assert store.circuit_admit("*", "sms", now=T0 + 31, cooldown=30) == "trial"
    assert store.circuit_admit("*", "sms", now=T0 + 31, cooldown=30) == "open"  # one trial
    store.circuit_record("*", "sms", ok=True, now=T0 + 32, threshold=3, cooldown=30)
    assert store.circuit_admit("*", "sms", now=T0 + 32, cooldown=30) == "closed"


def test_a_failed_trial_reopens_and_tenants_do_not_share_circuits(store: Store) -> None:
    for _ in range(3):
        fail(store, T0, tenant="acme")
    assert store.circuit_admit("globex", "sms", now=T0, cooldown=30) == "closed"
    assert store.circuit_admit("acme", "sms", now=T0 + 31, cooldown=30) == "trial"
    fail(store, T0 + 31, tenant="acme")
    assert store.circuit_admit("acme", "sms", now=T0 + 32, cooldown=30) == "open"
    assert store.circuit_admit("acme", "sms", now=T0 + 62, cooldown=30) == "trial"


def test_only_one_of_many_concurrent_callers_gets_the_trial(backend: Backend) -> None:
    stores = [backend.open() for _ in range(4)]
    for _ in range(3):
        fail(stores[0], T0)
    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(
            lambda i: stores[i % 4].circuit_admit("*", "sms", now=T0 + 31, cooldown=30),
            range(16),
        ))
    assert verdicts.count("trial") == 1
    assert verdicts.count("open") == 15
