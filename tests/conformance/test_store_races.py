"""Races between writers on real threads, each with its own store (its own connection on
SQLite and PostgreSQL): exactly one wins, and nothing is lost."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from store_backends import Backend

from underway.errors import ConflictError, FencedError
from underway.store import AppendBatch, NewRun, RunUpdate, SignalRecord, Store, StoredEvent

T0 = 1_000.0
ROUNDS = 10


def race(*attempts: Callable[[], Any]) -> list[Any]:
    """Run each attempt on its own thread, released together; an exception is a result."""
    gate = threading.Barrier(len(attempts))

    def go(attempt: Callable[[], Any]) -> Any:
        gate.wait()
        try:
            return attempt()
        except (ConflictError, FencedError) as exc:
            return exc

    with ThreadPoolExecutor(len(attempts)) as pool:
        return list(pool.map(go, attempts))


def start(store: Store, run_id: str) -> None:
    store.create_run(NewRun(
        tenant_id="t1", run_id=run_id, flow="f", idempotency_key=None,
        first_event=StoredEvent(1, "RunStarted", b"{}", f"h{run_id}"), blobs={}, step="s",
        now=T0, next_wake_at=T0,
    ))


def append(
    store: Store, run_id: str, seq: int, token: int, writer: str,
    update: RunUpdate | None = None,
) -> Callable[[], bool]:
    return lambda: store.append(AppendBatch(
        tenant_id="t1", run_id=run_id, expected_seq=seq - 1, fence=token,
        events=[StoredEvent(seq, "StepCompleted", writer.encode(), f"h{writer}{seq}")],
        now=T0 + seq, update=update or RunUpdate("ready", "s", T0 + seq),
        blobs={f"blob-{writer}-{seq}": writer.encode()}, checkpoint=(seq, writer.encode()),
    ))


def test_two_writers_at_the_same_seq_exactly_one_wins(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    start(a, "r1")
    [lease] = a.claim(owner="w", now=T0, ttl=600)
    for seq in range(2, 2 + ROUNDS):
        results = race(append(a, "r1", seq, lease.token, "a"),
                       append(b, "r1", seq, lease.token, "b"))
        winners = [w for w, r in zip("ab", results, strict=True) if r is False]
        losers = [r for r in results if r is not False]
        assert len(winners) == 1, results
        assert len(losers) == 1 and isinstance(losers[0], ConflictError)
        won, lost = winners[0], "b" if winners[0] == "a" else "a"
        assert [(e.seq, e.payload) for e in b.load_events("t1", "r1", after_seq=seq - 1)] == [
            (seq, won.encode())]
        assert a.load_checkpoint("t1", "r1") == (seq, won.encode())
        assert b.get_blobs("t1", [f"blob-{won}-{seq}", f"blob-{lost}-{seq}"]) == {
            f"blob-{won}-{seq}": won.encode()}
    run = b.get_run("t1", "r1")
    assert run is not None and run.last_seq == 1 + ROUNDS


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
