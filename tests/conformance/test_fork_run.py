"""The journal's fork and batch-read methods on every backend: a fork is created and linked
in its parent's journal in one transaction, or not at all; checkpoints of many runs are read
with their tails."""

from __future__ import annotations

import pytest
from builders import T0, batch, create, event, fake_hash, lease_of, race, seqs

from underway.errors import ConflictError, RunNotFound
from underway.store import NewRun, RunUpdate, Store, StoredEvent
from underway.store.base import ForkLink
from underway.store.journal import RUN_BATCH


def _fork(run_id: str = "fork-1", *, tenant: str = "t1", key: str | None = None) -> NewRun:
    return NewRun(
        tenant_id=tenant, run_id=run_id, flow="f", idempotency_key=key,
        first_event=StoredEvent(1, "RunStarted", b'{"fork":true}', fake_hash(f"{run_id}1")),
        blobs={"fork-blob": b"blob of the fork"}, step="again", now=T0 + 50,
        next_wake_at=T0 + 50,
    )


def _link(after: int, *, parent: str = "r1", now: float = T0 + 50) -> ForkLink:
    forked = StoredEvent(after + 1, "RunForked", b'{"forked":1}', fake_hash(f"fork{after + 1}"))
    return ForkLink("t1", parent, after, forked, now)


def _finished(store: Store, events: int = 3) -> None:
    """Run r1, ended and handed back after ``events`` events."""
    create(store)
    store.append(batch(lease_of(store), 1, count=events - 1, release=True,
                       update=RunUpdate("completed", None, None)))


def test_a_fork_is_created_and_its_parent_linked_together(store: Store) -> None:
    _finished(store)
    forked = store.fork_run(_fork(), _link(3))
    assert (forked.run_id, forked.status, forked.step, forked.last_seq) == (
        "fork-1", "ready", "again", 1)
    assert store.load_events("t1", "fork-1") == [_fork().first_event]
    assert store.get_blobs("t1", ["fork-blob"]) == {"fork-blob": b"blob of the fork"}
    assert seqs(store) == [1, 2, 3, 4]
    assert store.load_events("t1", "r1", after_seq=3)[0].type == "RunForked"
    parent = store.get_run("t1", "r1")
    assert parent is not None
    assert (parent.status, parent.last_seq, parent.last_hash, parent.updated_at) == (
        "completed", 4, fake_hash("fork4"), T0 + 50)
    # The fork is due now, the finished parent is not.
    assert [lease.run_id for lease in store.claim(owner="w", now=T0 + 60, ttl=30)] == ["fork-1"]


def test_a_fork_is_never_found_by_an_idempotency_key(store: Store) -> None:
    _finished(store)
    store.fork_run(_fork(key="order-7"), _link(3))
    fork = store.get_run("t1", "fork-1")
    assert fork is not None and fork.idempotency_key is None
    again, created = create(store, "r2", key="order-7")
    assert created and again.run_id == "r2"


def test_a_fork_of_a_moved_parent_changes_nothing(store: Store) -> None:
    _finished(store)
    with pytest.raises(ConflictError, match="expected last seq 2"):
        store.fork_run(_fork(), _link(2))
    assert store.get_run("t1", "fork-1") is None
    assert seqs(store) == [1, 2, 3]


def test_a_fork_of_a_run_a_worker_holds_is_refused(store: Store) -> None:
    create(store)
    lease = lease_of(store, now=T0, ttl=100)
    with pytest.raises(ConflictError, match="being advanced"):
        store.fork_run(_fork(), _link(1, now=T0 + 50))
    assert store.get_run("t1", "fork-1") is None and seqs(store) == [1]
    # Once the lease has expired (its worker is gone) the run may be forked.
    store.fork_run(_fork(), _link(1, now=T0 + 101))
    assert seqs(store) == [1, 2]
    # The worker that lost track of the run cannot append over the fork's event.
    with pytest.raises(ConflictError):
        store.append(batch(lease, 1))


def test_a_fork_of_an_unknown_run_or_onto_an_existing_id_fails(store: Store) -> None:
    with pytest.raises(RunNotFound):
        store.fork_run(_fork(), _link(1, parent="nope"))
    _finished(store)
    create(store, "fork-1")
    with pytest.raises(ConflictError):
        store.fork_run(_fork(), _link(3))
    assert seqs(store) == [1, 2, 3]


def test_two_forks_racing_from_one_head_make_one(store: Store) -> None:
    _finished(store)
    results = race(lambda: store.fork_run(_fork("fork-a"), _link(3)),
                   lambda: store.fork_run(_fork("fork-b"), _link(3)))
    made = [r for r in results if not isinstance(r, Exception)]
    assert len(made) == 1
    assert seqs(store) == [1, 2, 3, 4]
    assert [r.run_id for r in store.list_runs("t1") if r.run_id.startswith("fork")] == [
        made[0].run_id]


def test_checkpoints_of_many_runs_come_with_their_tails(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        create(store, run_id)
    store.append(batch(lease_of(store, "a"), 1, count=3, checkpoint=(4, b"state-a")))
    lease = lease_of(store, "b")
    store.append(batch(lease, 1, count=1, checkpoint=(2, b"state-b")))
    store.append(batch(lease, 2, count=2))
    found = store.load_checkpoints("t1", ["a", "b", "c", "missing"])
    assert set(found) == {"a", "b"}
    assert (found["a"].seq, found["a"].state, [e.seq for e in found["a"].tail]) == (
        4, b"state-a", [4])
    assert (found["b"].seq, found["b"].state, [e.seq for e in found["b"].tail]) == (
        2, b"state-b", [2, 3, 4])
    assert found["b"].tail == store.load_events("t1", "b", after_seq=1)
    assert store.load_checkpoints("t2", ["a", "b"]) == {}


def test_checkpoints_of_more_runs_than_a_query_takes(store: Store) -> None:
    names = [f"r{i:04d}" for i in range(RUN_BATCH + 3)]
    for name in names:
        create(store, name)
        store.append(batch(lease_of(store, name), 1, checkpoint=(2, name.encode()),
                           release=True))
    found = store.load_checkpoints("t1", names)
    assert sorted(found) == names
    assert all(found[n].state == n.encode() and found[n].tail == [event(2, n)]
               for n in names)
