"""The journal on every backend: idempotent creation, fenced atomic appends (one of two
racing writers wins), checkpoints and blobs."""

from __future__ import annotations

import json

import pytest
from builders import (
    ROUNDS,
    T0,
    append,
    batch,
    create,
    event,
    fake_hash,
    lease_of,
    race,
    seqs,
    start,
)
from store_backends import Backend

from underway.codec import blob_key
from underway.errors import ConflictError, FencedError, RunNotFound
from underway.store import AppendBatch, Lease, RunUpdate, Store
from underway.store.journal import BLOB_BATCH


# -- creation ------------------------------------------------------------------------------
def test_create_run_stores_row_first_event_and_blobs(store: Store) -> None:
    run, created = create(store, blobs={"k1": b"blob-1"}, wake=T0 + 3)
    assert created
    assert (run.tenant_id, run.run_id, run.flow, run.status, run.step) == (
        "t1", "r1", "f", "ready", "start")
    assert (run.last_seq, run.last_hash, run.next_wake_at) == (1, fake_hash("r11"), T0 + 3)
    assert (run.lease_owner, run.lease_token, run.control_pending) == (None, 0, False)
    assert store.get_run("t1", "r1") == run
    assert store.load_events("t1", "r1") == [event(1, "r1", "RunStarted")]
    assert store.get_blobs("t1", ["k1"]) == {"k1": b"blob-1"}


def test_create_run_with_the_same_key_returns_the_first_run(store: Store) -> None:
    first, created = create(store, "r1", key="order-7")
    again, created_again = create(store, "r2", key="order-7", now=T0 + 10)
    assert created and not created_again
    assert again.run_id == "r1"
    assert again.created_at == first.created_at
    assert store.get_run("t1", "r2") is None
    assert seqs(store) == [1]


def test_the_same_key_in_another_tenant_or_flow_is_another_run(store: Store) -> None:
    create(store, "r1", key="order-7")
    other_tenant, created = create(store, "r2", key="order-7", tenant="t2")
    assert created and other_tenant.run_id == "r2"
    other_flow, created = create(store, "r3", key="order-7", flow="g")
    assert created and other_flow.run_id == "r3"
    assert [r.run_id for r in store.list_runs("t1")] == ["r1", "r3"]


def test_creating_an_existing_run_id_without_a_key_conflicts(store: Store) -> None:
    create(store, "r1")
    with pytest.raises(ConflictError):
        create(store, "r1")
    assert seqs(store) == [1]


# -- appends -------------------------------------------------------------------------------
def test_append_moves_the_run_row_with_its_events(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    update = RunUpdate("waiting", "later", T0 + 60, None, None)
    assert store.append(batch(lease, 1, count=3, update=update, now=T0 + 2)) is False
    assert seqs(store) == [1, 2, 3, 4]
    run = store.get_run("t1", "r1")
    assert run is not None
    assert (run.status, run.step, run.next_wake_at, run.updated_at) == (
        "waiting", "later", T0 + 60, T0 + 2)
    assert (run.last_seq, run.last_hash) == (4, fake_hash("r14"))
    assert run.lease_owner == "w1"  # appending keeps the lease unless told to release
    failed = RunUpdate("failed", "later", None, None, "boom")
    store.append(batch(lease, 4, update=failed, release=True))
    run = store.get_run("t1", "r1")
    assert run is not None
    assert (run.status, run.error, run.lease_owner, run.lease_expires_at) == (
        "failed", "boom", None, None)
    assert store.load_events("t1", "r1", after_seq=3) == [event(4), event(5)]


def test_append_with_a_stale_expected_seq_conflicts_and_stores_nothing(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    store.append(batch(lease, 1))
    before = store.get_run("t1", "r1")
    with pytest.raises(ConflictError):
        store.append(batch(
            lease, 1, blobs={"b": b"x"}, checkpoint=(2, b"cp"), update=RunUpdate("completed",
            None, None),
        ))
    assert seqs(store) == [1, 2]
    assert store.get_run("t1", "r1") == before
    assert store.load_checkpoint("t1", "r1") is None
    assert store.get_blobs("t1", ["b"]) == {}


def test_append_with_a_stale_lease_token_is_fenced_and_stores_nothing(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    with pytest.raises(FencedError):
        store.append(batch(lease, 1, fence=lease.token - 1, checkpoint=(2, b"cp")))
    assert seqs(store) == [1]
    assert store.load_checkpoint("t1", "r1") is None
    store.release(lease)
    with pytest.raises(FencedError):  # a released lease cannot write either
        store.append(batch(lease, 1))
    assert seqs(store) == [1]


def test_append_to_a_missing_run_is_refused(store: Store) -> None:
    ghost = Lease("t1", "ghost", "w1", 1, T0 + 30)
    with pytest.raises(RunNotFound):
        store.append(batch(ghost, 1))
    assert store.load_events("t1", "ghost") == []


def test_an_append_without_update_leaves_the_run_row_and_still_checks_the_journal_head(
    store: Store,
) -> None:
    create(store)
    lease = lease_of(store)
    quiet = AppendBatch(
        tenant_id="t1", run_id="r1", expected_seq=1, fence=lease.token,
        events=[event(2), event(3)], now=T0 + 1,
    )
    store.append(quiet)
    run = store.get_run("t1", "r1")
    assert run is not None and (run.last_seq, run.status, run.step) == (1, "ready", "start")
    assert [e.seq for e in store.load_events("t1", "r1")] == [1, 2, 3]
    # The journal, not the row, is the sequence check.
    with pytest.raises(ConflictError):
        store.append(batch(lease, 1))
    with pytest.raises(ConflictError):
        store.append(batch(lease, 4, expected=4))
    store.append(batch(lease, 3, update=RunUpdate("waiting", "later", T0 + 60), release=True))
    run = store.get_run("t1", "r1")
    assert run is not None
    assert (run.last_seq, run.last_hash, run.status) == (4, fake_hash("r14"), "waiting")
    assert run.lease_owner is None


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


# -- checkpoints and blobs -----------------------------------------------------------------
def test_checkpoint_is_written_with_its_append_and_replaced_by_the_next(store: Store) -> None:
    create(store)
    lease = lease_of(store)
    store.append(batch(lease, 1, checkpoint=(2, b"state-2")))
    assert store.load_checkpoint("t1", "r1") == (2, b"state-2")
    with pytest.raises(ConflictError):
        store.append(batch(lease, 1, checkpoint=(2, b"forged")))
    assert store.load_checkpoint("t1", "r1") == (2, b"state-2")
    store.append(batch(lease, 2, count=2, checkpoint=(4, b"state-4")))
    assert store.load_checkpoint("t1", "r1") == (4, b"state-4")


def test_checkpoints_can_be_dropped_by_run_or_tenant(store: Store) -> None:
    for run_id in ("r1", "r2"):
        create(store, run_id)
        store.append(batch(lease_of(store, run_id), 1, checkpoint=(2, b"cp")))
    assert store.delete_checkpoints("t1", "r1") == 1
    assert store.load_checkpoint("t1", "r1") is None
    assert store.load_checkpoint("t1", "r2") == (2, b"cp")
    assert store.delete_checkpoints("t1") == 1
    assert store.load_checkpoint("t1", "r2") is None
    assert seqs(store, "r2") == [1, 2]  # checkpoints are caches; events stay


def test_blobs_are_stored_once_and_fetched_in_one_call(store: Store) -> None:
    create(store, "r1", blobs={"shared": b"first"})
    create(store, "r2")
    lease = lease_of(store, "r2")
    store.append(batch(lease, 1, blobs={"shared": b"second", "own": b"mine"}))
    found = store.get_blobs("t1", ["shared", "own", "missing"])
    assert found == {"shared": b"first", "own": b"mine"}
    assert store.get_blobs("t1", []) == {}


def test_many_blobs_are_read_in_one_call_across_query_batches(store: Store) -> None:
    blobs = {f"k{i:05d}": f"blob {i}".encode() for i in range(BLOB_BATCH * 2 + 7)}
    create(store, blobs=blobs)
    keys = [*blobs, "missing"]
    assert store.get_blobs("t1", keys) == blobs
    assert store.get_blobs("t2", keys) == {}


def node(prev: str | None, item: str) -> bytes:
    """A list node as the codec stores one: canonical JSON of {"p": previous key, "x": item}."""
    head = b'{"p":null,"x":' if prev is None else b'{"p":"' + prev.encode() + b'","x":'
    return head + json.dumps(item).encode() + b"}"


def chain(items: list[str]) -> tuple[list[str], dict[str, bytes]]:
    """The node keys of a list stored as a chain, oldest first, and the nodes by key."""
    keys: list[str] = []
    nodes: dict[str, bytes] = {}
    for item in items:
        data = node(keys[-1] if keys else None, item)
        keys.append(blob_key(data))
        nodes[keys[-1]] = data
    return keys, nodes


def test_a_chain_of_blobs_is_read_from_its_head_in_one_call(store: Store) -> None:
    keys, nodes = chain([f"message {i}" for i in range(300)])
    create(store, blobs={**nodes, "other": b"not linked"})
    assert store.get_blob_chain("t1", keys[-1]) == nodes
    assert store.get_blob_chain("t1", keys[99]) == {k: nodes[k] for k in keys[:100]}
    assert store.get_blob_chain("t1", keys[-1], limit=10) == {k: nodes[k] for k in keys[-10:]}
    assert store.get_blob_chain("t1", "other") == {"other": b"not linked"}
    assert store.get_blob_chain("t1", "missing") == {}
    assert store.get_blob_chain("t2", keys[-1]) == {}


def test_a_chain_stops_where_a_node_is_missing_or_stored_for_another_tenant(
    store: Store,
) -> None:
    keys, nodes = chain(["a", "b", "c", "d"])
    create(store, blobs={k: nodes[k] for k in keys[2:]})
    create(store, "r2", tenant="t2", blobs={k: nodes[k] for k in keys[:2]})
    assert store.get_blob_chain("t1", keys[-1]) == {k: nodes[k] for k in keys[2:]}


def test_sealed_blobs_link_nowhere(store: Store) -> None:
    keys, nodes = chain(["a", "b"])
    sealed = {k: b"\x00sealed" + v for k, v in nodes.items()}
    create(store, blobs=sealed)
    assert store.get_blob_chain("t1", keys[-1]) == {keys[-1]: sealed[keys[-1]]}


def test_a_journal_longer_than_a_page_loads_whole_and_in_order(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("underway.store._sqlbase.journal.EVENT_PAGE", 3)
    create(store)
    lease = lease_of(store)
    store.append(batch(lease, 1, count=9))  # seqs 1-10: pages of 3 end inside and at the end
    assert seqs(store) == list(range(1, 11))
    assert store.load_events("t1", "r1", after_seq=4) == [event(s) for s in range(5, 11)]
    assert store.load_events("t1", "r1", after_seq=7) == [event(8), event(9), event(10)]
    assert store.load_events("t1", "r1", after_seq=10) == []
