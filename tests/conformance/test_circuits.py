"""Circuit state is shared through the store: every backend opens, fails fast, hands out one
half-open trial at a time, and closes on success."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from store_backends import Backend

from underway.store import Store

T0 = 1_000.0


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
