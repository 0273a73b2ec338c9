"""Group commit on every backend: ``append_many`` writes several runs' batches, each fenced
and sequence-checked alone; a batch refused is left out whole and the others commit."""

from __future__ import annotations

import dataclasses

import pytest
from builders import T0, batch, create, event, lease_of, race, seqs, signal
from store_backends import Backend

from underway.errors import ConflictError, FencedError, RunNotFound
from underway.store import AppendBatch, Lease, RunUpdate, Store


def leased(store: Store, *runs: str) -> list[Lease]:
    for run_id in runs:
        create(store, run_id)
    return [lease_of(store, run_id) for run_id in runs]


def test_every_batch_of_a_group_commits_with_its_row_blobs_and_checkpoint(
    store: Store,
) -> None:
    leases = leased(store, "r1", "r2", "r3")
    results = store.append_many([
        batch(leases[0], 1, count=2, blobs={"k1": b"one"}),
        batch(leases[1], 1, update=RunUpdate("waiting", "later", T0 + 50), release=True),
        batch(leases[2], 1, checkpoint=(2, b"state-3")),
    ])
    assert results == [False, False, False]
    assert seqs(store, "r1") == [1, 2, 3]
    assert seqs(store, "r2") == [1, 2] and seqs(store, "r3") == [1, 2]
    assert store.get_blobs("t1", ["k1"]) == {"k1": b"one"}
    assert store.load_checkpoint("t1", "r3") == (2, b"state-3")
    r2 = store.get_run("t1", "r2")
    assert r2 is not None
    assert (r2.status, r2.step, r2.next_wake_at, r2.lease_owner) == (
        "waiting", "later", T0 + 50, None)
    assert r2.last_seq == 2


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("refusal", ["stale lease", "moved on"])
def test_a_refused_batch_is_left_out_whole_and_the_others_commit(
    store: Store, position: int, refusal: str
) -> None:
    leases = leased(store, "r1", "r2", "r3")
    group = [batch(lease, 1, count=2) for lease in leases]
    refused = leases[position]
    if refusal == "stale lease":
        group[position] = batch(refused, 1, fence=refused.token + 7, blobs={"k": b"x"},
                                checkpoint=(3, b"stale"))
    else:
        group[position] = batch(refused, 1, expected=5, blobs={"k": b"x"},
                                checkpoint=(3, b"late"))
    results = store.append_many(group)
    kind = FencedError if refusal == "stale lease" else ConflictError
    assert isinstance(results[position], kind), results
    assert [r for i, r in enumerate(results) if i != position] == [False, False]
    assert seqs(store, refused.run_id) == [1]
    assert store.get_blobs("t1", ["k"]) == {}
    assert store.load_checkpoint("t1", refused.run_id) is None
    for lease in leases:
        if lease is not refused:
            assert seqs(store, lease.run_id) == [1, 2, 3]
    # the refused run appends where its journal really ends, with the others again
    again = store.append_many([
        batch(lease, 1 if lease is refused else 3) for lease in leases
    ])
    assert again == [False, False, False]
    assert seqs(store, refused.run_id) == [1, 2]


def test_a_missing_run_is_refused_alone(store: Store) -> None:
    [lease] = leased(store, "r1")
    ghost = Lease("t1", "ghost", lease.owner, lease.token, lease.expires_at)
    results = store.append_many([batch(ghost, 1), batch(lease, 1)])
    assert isinstance(results[0], RunNotFound | FencedError)
    assert results[1] is False
    assert seqs(store, "r1") == [1, 2]
    assert store.load_events("t1", "ghost") == []


def test_two_batches_of_one_run_in_a_group_commit_in_order_or_conflict(
    store: Store,
) -> None:
    [lease] = leased(store, "r1")
    results = store.append_many([batch(lease, 1), batch(lease, 2)])
    assert results == [False, False]
    assert seqs(store, "r1") == [1, 2, 3]
    results = store.append_many([batch(lease, 3), batch(lease, 3)])
    assert results[0] is False and isinstance(results[1], ConflictError)
    assert seqs(store, "r1") == [1, 2, 3, 4]


def test_an_empty_group_and_empty_batches_write_nothing(store: Store) -> None:
    [lease] = leased(store, "r1")
    assert store.append_many([]) == []
    empty = AppendBatch("t1", "r1", 1, lease.token, [], T0 + 1, None, {}, None, [])
    assert store.append_many([empty, batch(lease, 1)]) == [False, False]
    assert seqs(store, "r1") == [1, 2]


def test_a_group_reports_control_signals_waiting_per_run(store: Store) -> None:
    leases = leased(store, "r1", "r2")
    store.send_signal(signal("underway.cancel", "c1", run_id="r2"))
    results = store.append_many([batch(leases[0], 1), batch(leases[1], 1)])
    assert results == [False, True]


def test_signals_sent_by_a_batch_of_a_group_arrive_with_it(store: Store) -> None:
    leases = leased(store, "r1", "r2")
    create(store, "parent")
    sending = dataclasses.replace(
        batch(leases[0], 1), signals=[signal("underway.child", "s1", run_id="parent")])
    stale = batch(leases[1], 1, fence=leases[1].token + 1)
    results = store.append_many([sending, stale])
    assert results[0] is False and isinstance(results[1], FencedError)
    assert [s.signal_id for s in store.pending_signals("t1", "parent")] == ["s1"]
    assert seqs(store, "r1") == [1, 2] and seqs(store, "r2") == [1]


def test_concurrent_groups_over_the_same_runs_never_interleave_a_journal(
    backend: Backend, store: Store
) -> None:
    leases = leased(store, *(f"r{i}" for i in range(6)))
    other = backend.open()
    try:
        def group(s: Store, tag: str) -> list[object]:
            return list(s.append_many([
                _tagged(batch(lease, 1), tag) for lease in leases
            ]))

        first, second = race(lambda: group(store, "a"), lambda: group(other, "b"))
    finally:
        if other is not store:
            other.close()
    for i, lease in enumerate(leases):
        won = [r for r in (first[i], second[i]) if r is False]
        lost = [r for r in (first[i], second[i]) if isinstance(r, ConflictError)]
        assert len(won) == 1 and len(lost) == 1, (first[i], second[i])
        [stored] = store.load_events("t1", lease.run_id)[1:]
        assert stored.seq == 2


def _tagged(b: AppendBatch, tag: str) -> AppendBatch:
    return dataclasses.replace(b, events=[event(e.seq, b.run_id + tag) for e in b.events])
