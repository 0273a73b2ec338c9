"""The inbox on every backend: signals queued once and consumed by the append that handles
them, runs woken by what they wait for (even when the signal races the wait), and decision
nonces accepted once per tenant."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from builders import ROUNDS, T0, WAIT_GO, append, batch, create, lease_of, race, signal, start
from store_backends import Backend

from underway.errors import ConflictError
from underway.store import RunUpdate, SignalRecord, Store


# -- signals -------------------------------------------------------------------------------
def test_a_signal_is_queued_once_per_id_in_order(store: Store) -> None:
    create(store)
    assert store.send_signal(signal("b", "s2", at=T0 + 2))
    assert store.send_signal(signal("a", "s1", at=T0 + 1))
    assert store.send_signal(signal("c", "s0", at=T0 + 2))
    assert not store.send_signal(signal("a", "s1", at=T0 + 9))
    pending = store.pending_signals("t1", "r1")
    assert [(s.signal_id, s.name) for s in pending] == [("s1", "a"), ("s0", "c"), ("s2", "b")]
    assert pending[0] == signal("a", "s1", at=T0 + 1)


def test_signals_are_consumed_by_the_append_that_handles_them(store: Store) -> None:
    create(store)
    store.send_signal(signal("go", "s1"))
    store.send_signal(signal("go", "s2"))
    lease = lease_of(store)
    with pytest.raises(ConflictError):
        store.append(batch(lease, 5, expected=5, consumed=["s1"]))
    assert [s.signal_id for s in store.pending_signals("t1", "r1")] == ["s1", "s2"]
    store.append(batch(lease, 1, consumed=["s1"]))
    assert [s.signal_id for s in store.pending_signals("t1", "r1")] == ["s2"]
    assert not store.send_signal(signal("go", "s1"))  # consumed ids stay taken


def test_an_activation_reads_control_signals_and_the_oldest_it_waits_for(
        store: Store) -> None:
    create(store)
    lease = lease_of(store)
    store.send_signal(signal("note", "n1", at=T0 + 1))
    store.send_signal(signal("go", "g2", at=T0 + 3))
    store.send_signal(signal("underway.cancel", "c1", at=T0 + 4))
    store.send_signal(signal("go", "g1", at=T0 + 2))
    store.send_signal(signal("note", "n2", at=T0 + 5))
    store.send_signal(signal("underway.child", "c2", at=T0 + 6))

    def ids(waiting: str | None) -> list[str]:
        return [s.signal_id for s in store.actionable_signals("t1", "r1", waiting=waiting)]

    assert ids("go") == ["g1", "c1", "c2"]
    assert ids("note") == ["n1", "c1", "c2"]
    assert ids(None) == ids("absent") == ids("underway.child") == ["c1", "c2"]
    store.append(batch(lease, 1, consumed=["g1", "c1"]))
    assert ids("go") == ["g2", "c2"]
    assert store.actionable_signals("t1", "r1", waiting="go")[0] == signal("go", "g2",
                                                                           at=T0 + 3)


def test_a_signal_wakes_the_run_waiting_for_it(store: Store) -> None:
    create(store)
    store.append(batch(lease_of(store), 1, update=WAIT_GO, release=True))
    assert store.claim(owner="w", now=T0 + 100, ttl=30) == []
    store.send_signal(signal("other", "s0", at=T0 + 4))
    assert store.claim(owner="w", now=T0 + 100, ttl=30) == []
    store.send_signal(signal("go", "s1", at=T0 + 5))
    run = store.get_run("t1", "r1")
    assert run is not None and run.next_wake_at == T0 + 5 and not run.control_pending
    assert store.next_wake_at() == T0 + 5
    assert [x.run_id for x in store.claim(owner="w", now=T0 + 5, ttl=30)] == ["r1"]


def test_a_signal_sent_before_the_wait_is_caught_by_the_append(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    store.send_signal(signal("go", "early", at=T0 + 1))
    run = store.get_run("t1", "r1")
    assert run is not None and run.next_wake_at == T0  # not waiting yet: nothing to wake
    store.append(batch(lease, 1, update=WAIT_GO, release=True, now=T0 + 2))
    run = store.get_run("t1", "r1")
    assert run is not None and run.status == "waiting" and run.next_wake_at == T0 + 2
    assert [x.run_id for x in store.claim(owner="w", now=T0 + 2, ttl=30)] == ["r1"]


def test_a_consumed_signal_does_not_wake_the_next_wait(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    store.send_signal(signal("go", "s1"))
    store.append(batch(lease, 1, update=WAIT_GO, consumed=["s1"], release=True))
    run = store.get_run("t1", "r1")
    assert run is not None and run.next_wake_at is None


def test_control_signals_wake_any_unfinished_run_and_are_reported(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    store.append(batch(lease, 1, update=RunUpdate("waiting", "x", T0 + 999), release=False))
    store.send_signal(signal("underway.cancel", "c1", at=T0 + 7))
    run = store.get_run("t1", "r1")
    assert run is not None and run.control_pending and run.next_wake_at == T0 + 7
    assert store.append(batch(lease, 2)) is True
    assert store.append(batch(lease, 3, consumed=["c1"])) is False
    run = store.get_run("t1", "r1")
    assert run is not None and not run.control_pending


def test_a_finished_run_is_not_woken(store: Store) -> None:
    create(store)
    store.append(batch(lease_of(store), 1, update=RunUpdate("completed", None, None),
                       release=True))
    assert store.send_signal(signal("underway.cancel", "c1"))
    run = store.get_run("t1", "r1")
    assert run is not None and run.next_wake_at is None and not run.control_pending
    assert store.next_wake_at() is None


def test_a_signal_racing_the_start_of_a_wait_is_never_lost(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    wait = RunUpdate("waiting", "s", None, "go")
    for i in range(ROUNDS):
        run_id = f"r{i}"
        start(a, run_id)
        [lease] = a.claim(owner="w", now=T0, ttl=30, tenant_id="t1", run_id=run_id)
        race(append(a, run_id, 2, lease.token, "w", update=wait),
             lambda run_id=run_id: b.send_signal(SignalRecord(
                 "t1", run_id, "s1", "go", b"{}", None, T0 + 1)))
        run = b.get_run("t1", run_id)
        assert run is not None and run.status == "waiting"
        assert run.next_wake_at is not None, f"{run_id}: the signal was lost"


# -- decision nonces -----------------------------------------------------------------------
def test_a_nonce_is_accepted_once_per_tenant(store: Store) -> None:
    assert store.use_nonce("acme", "n-1", run_id="r-1", request_id="q-1", at=1.0) is True
    # The same request again: a decision redelivered after a crash, not a replay.
    assert store.use_nonce("acme", "n-1", run_id="r-1", request_id="q-1", at=2.0) is True
    assert store.use_nonce("acme", "n-1", run_id="r-1", request_id="q-2", at=2.5) is False
    assert store.use_nonce("acme", "n-1", run_id="r-2", request_id="q-9", at=3.0) is False
    assert store.use_nonce("globex", "n-1", run_id="r-1", request_id="q-1", at=4.0) is True
    assert store.use_nonce("acme", "n-2", run_id="r-1", request_id="q-1", at=5.0) is True


def test_of_two_racing_callers_exactly_one_uses_the_nonce(backend: Backend) -> None:
    stores = [backend.open(), backend.open()]
    rounds = 40
    results: list[list[bool]] = [[] for _ in range(rounds)]
    barrier = threading.Barrier(2)

    def race(i: int) -> None:
        for n in range(rounds):
            barrier.wait()
            used = stores[i].use_nonce("acme", f"nonce-{n}", run_id=f"r-{i}",
                                       request_id="q", at=float(n))
            results[n].append(used)

    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(race, i) for i in range(2)]:
            f.result()
    assert all(sorted(r) == [False, True] for r in results), results


# -- signals to other runs, with an append ------------------------------------------------
def test_an_append_delivers_signals_to_other_runs_in_its_transaction(store: Store) -> None:
    create(store, "child")
    create(store, "parent")
    store.append(batch(lease_of(store, "parent"), 1,
                       update=RunUpdate("waiting", "wait", None, "underway.child"),
                       release=True))
    lease = lease_of(store, "child")
    ended = signal("underway.child", "child:child", run_id="parent", at=T0 + 7)
    with pytest.raises(ConflictError):
        store.append(replace(batch(lease, 5, expected=5), signals=[ended]))
    assert store.pending_signals("t1", "parent") == []  # refused with the append
    store.append(replace(batch(lease, 1, update=RunUpdate("completed", None, None),
                               release=True), signals=[ended]))
    assert store.pending_signals("t1", "parent") == [ended]
    parent = store.get_run("t1", "parent")
    assert parent is not None and parent.control_pending and parent.next_wake_at == T0 + 7
    assert [x.run_id for x in store.claim(owner="w", now=T0 + 7, ttl=30)] == ["parent"]


def test_a_signal_to_a_run_not_created_yet_waits_for_it(store: Store) -> None:
    create(store, "parent")
    cancel = signal("underway.cancel", "cancel:parent", run_id="later")
    store.append(replace(batch(lease_of(store, "parent"), 1), signals=[cancel]))
    create(store, "later")
    assert store.pending_signals("t1", "later") == [cancel]


def test_runs_signalling_each_other_in_their_appends_never_deadlock(backend: Backend) -> None:
    """A parent's cancel cascade and its child's end commit at once: each append locks its
    own run and signals the other's. The runs are locked in one order (every backend), so
    both commit and both signals arrive, round after round."""
    a, b = backend.open(), backend.open()
    for i in range(ROUNDS * 3):
        first, second = f"p{i}", f"c{i}"
        create(a, first)
        create(a, second)
        one, two = lease_of(a, first), lease_of(a, second)
        to_second = signal("underway.cancel", f"cancel:{i}", run_id=second)
        to_first = signal("underway.child", f"child:{i}", run_id=first)
        results = race(
            lambda one=one, to_second=to_second: a.append(
                replace(batch(one, 1), signals=[to_second])),
            lambda two=two, to_first=to_first: b.append(
                replace(batch(two, 1), signals=[to_first])),
        )
        assert all(isinstance(r, bool) for r in results), f"round {i}: {results}"
        assert a.pending_signals("t1", second) == [to_second]
        assert a.pending_signals("t1", first) == [to_first]


def test_signals_sent_together_are_each_queued_once_and_wake_their_runs(store: Store) -> None:
    many = getattr(store, "send_signals", None)
    if many is None:  # the memory stores send one at a time
        assert store.dialect == "memory"
        return
    create(store, "r1")
    create(store, "r2")
    store.append(batch(lease_of(store, "r2"), 1, update=WAIT_GO, release=True))
    assert store.send_signal(signal("a", "old"))
    sent = many([signal("go", "s1", run_id="r2", at=T0 + 7), signal("a", "old"),
                 signal("b", "s2"), signal("b", "s2", at=T0 + 9), signal("c", "s3")])
    assert sent == [True, False, True, False, True]
    assert [s.signal_id for s in store.pending_signals("t1", "r1")] == ["old", "s2", "s3"]
    assert [s.signal_id for s in store.pending_signals("t1", "r2")] == ["s1"]
    woken = store.get_run("t1", "r2")
    assert woken is not None and woken.next_wake_at == T0 + 7
