"""The budget ledger on every backend: a tenant's day is seeded from the journal once, a
reservation is refused when it would cross a limit and changes nothing then, the same key
replaces its hold (a retry counts once), settling records what was spent and never
refuses, and days and tenants are apart."""

from __future__ import annotations

import threading

import pytest

from underway.store import Store
from underway.store.budgets import UNSEEDED, Refused

DAY = 1_717_200_000.0
LIMITS = {"money.INR": 1000.0, "tool_calls": 3.0}


def test_the_first_reservation_of_a_day_asks_for_the_journal_s_usage(store: Store) -> None:
    assert store.budget_used("t1", DAY) is None
    assert store.reserve_budget("t1", DAY, "k1", {"tool_calls": 1}, LIMITS) == UNSEEDED
    assert store.budget_used("t1", DAY) is None, "an unseeded answer writes nothing"
    seeded = store.reserve_budget("t1", DAY, "k1", {"tool_calls": 1}, LIMITS,
                                  baseline={"tool_calls": 1, "money.INR": 200})
    assert seeded is None
    assert store.budget_used("t1", DAY) == {"tool_calls": 2, "money.INR": 200}
    # The baseline counts once: a later seed attempt of the same day is ignored.
    assert store.reserve_budget("t1", DAY, "k2", {"tool_calls": 1}, LIMITS,
                                baseline={"tool_calls": 50}) is None
    assert store.budget_used("t1", DAY) == {"tool_calls": 3, "money.INR": 200}


def test_a_reservation_over_a_limit_is_refused_and_changes_nothing(store: Store) -> None:
    store.reserve_budget("t1", DAY, "a", {"money.INR": 700}, LIMITS, baseline={})
    refused = store.reserve_budget("t1", DAY, "b", {"money.INR": 700}, LIMITS)
    assert refused == Refused("money.INR", 1000.0, 1400.0)
    assert store.budget_used("t1", DAY) == {"money.INR": 700}
    # Reaching the limit exactly is allowed.
    assert store.reserve_budget("t1", DAY, "c", {"money.INR": 300}, LIMITS) is None
    assert store.budget_used("t1", DAY) == {"money.INR": 1000}


def test_the_same_key_replaces_its_hold(store: Store) -> None:
    store.reserve_budget("t1", DAY, "k", {"money.INR": 700}, LIMITS, baseline={})
    assert store.reserve_budget("t1", DAY, "k", {"money.INR": 700}, LIMITS) is None
    assert store.budget_used("t1", DAY) == {"money.INR": 700}
    assert store.reserve_budget("t1", DAY, "k", {"money.INR": 900}, LIMITS) is None
    assert store.budget_used("t1", DAY) == {"money.INR": 900}


def test_settling_records_what_was_spent_and_releasing_gives_the_room_back(
    store: Store,
) -> None:
    store.reserve_budget("t1", DAY, "m", {"tokens": 5000}, {"tokens": 6000}, baseline={})
    store.settle_budget("t1", "m", {"tokens": 1200})
    assert store.budget_used("t1", DAY) == {"tokens": 1200}
    store.reserve_budget("t1", DAY, "p", {"money.INR": 800}, LIMITS)
    store.settle_budget("t1", "p", {})
    assert store.budget_used("t1", DAY)["money.INR"] == 0  # type: ignore[index]
    store.settle_budget("t1", "no-such-hold", {"tokens": 99})
    assert store.budget_used("t1", DAY) == {"tokens": 1200, "money.INR": 0}


def test_days_and_tenants_are_apart(store: Store) -> None:
    store.reserve_budget("t1", DAY, "a", {"money.INR": 1000}, LIMITS, baseline={})
    assert store.reserve_budget("t2", DAY, "a", {"money.INR": 1000}, LIMITS,
                                baseline={}) is None
    assert store.reserve_budget("t1", DAY + 86_400, "b", {"money.INR": 1000}, LIMITS,
                                baseline={}) is None
    assert store.budget_used("t1", DAY) == {"money.INR": 1000}
    assert store.budget_used("t2", DAY) == {"money.INR": 1000}


@pytest.mark.parametrize("threads", [8])
def test_reservations_from_many_threads_never_cross_the_limit(store: Store,
                                                               threads: int) -> None:
    store.reserve_budget("t1", DAY, "seed", {}, LIMITS, baseline={})
    outcomes: list[object] = []
    gate = threading.Barrier(threads)

    def reserve(i: int) -> None:
        gate.wait()
        outcomes.append(store.reserve_budget("t1", DAY, f"k{i}", {"money.INR": 300}, LIMITS))

    workers = [threading.Thread(target=reserve, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sum(o is None for o in outcomes) == 3
    assert store.budget_used("t1", DAY) == {"money.INR": 900}
