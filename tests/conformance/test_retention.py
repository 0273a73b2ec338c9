"""Retention on every backend: finding finished runs past a time, purging one in one
transaction (or not at all: held, changed, purged already), the record of purges and
sweeps, and deleting blobs — never one written within the idle time asked for."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from builders import T0, batch, create, event, fake_hash, lease_of, signal
from store_backends import Backend

from underway.errors import ConflictError
from underway.store import NewRun, RunUpdate, Store, StoredEvent
from underway.store.base import HoldRecord, Purge, PurgedRun, SweepRecord

DONE = RunUpdate("completed", None, None)


def finish(store: Store, run_id: str, *, tenant: str = "t1", flow: str = "f",
           at: float = T0 + 1, status: str = "completed", error: str | None = None,
           subject: str | None = None) -> None:
    """A run of two events that ended ``status`` at ``at``, with a checkpoint, a blob and a
    signal."""
    store.create_run(NewRun(
        tenant_id=tenant, run_id=run_id, flow=flow, idempotency_key=None,
        first_event=event(1, run_id, "RunStarted"), blobs={f"b-{run_id}": b"big"},
        step="start", now=T0, next_wake_at=T0, subject=subject,
    ))
    lease = lease_of(store, run_id, tenant=tenant)
    store.append(batch(lease, 1, now=at, checkpoint=(2, b"cp"), release=True,
                       update=RunUpdate(status, None, None, error=error)))
    store.send_signal(signal("late", f"s-{run_id}", run_id=run_id, tenant=tenant))


def purge_of(store: Store, run_id: str, *, tenant: str = "t1", sweep: str = "s1") -> Purge:
    stored = store.load_events(tenant, run_id)
    return Purge(tenant, run_id, len(stored),
                 [StoredEvent(e.seq, e.type, b"tomb" + str(e.seq).encode(), e.hash)
                  for e in stored], sweep, T0 + 100, "retention.completed = 1d")


def ids(rows: list) -> list[str]:  # type: ignore[type-arg]
    return [r.run_id for r in rows]


def test_candidates_are_final_runs_ended_before_a_time_oldest_first(store: Store) -> None:
    finish(store, "b", at=T0 + 2)
    finish(store, "a", at=T0 + 2)
    finish(store, "old", at=T0 + 1)
    finish(store, "late", at=T0 + 50)
    finish(store, "bad", at=T0 + 1, status="failed")
    finish(store, "kyc", at=T0 + 1, flow="kyc")
    finish(store, "other", at=T0 + 1, tenant="t2")
    create(store, "live")
    found = store.retention_candidates("t1", status="completed", ended_before=T0 + 10)
    assert ids(found) == ["kyc", "old", "a", "b"]
    assert ids(store.retention_candidates("t1", status="failed", ended_before=T0 + 10)) == [
        "bad"]
    assert ids(store.retention_candidates("t1", status="completed", ended_before=T0 + 10,
                                          flow="kyc")) == ["kyc"]
    first = store.retention_candidates("t1", status="completed", ended_before=T0 + 10,
                                       limit=3)
    rest = store.retention_candidates("t1", status="completed", ended_before=T0 + 10,
                                      after=(first[-1].updated_at, first[-1].run_id))
    assert ids(first) + ids(rest) == ["kyc", "old", "a", "b"]
    store.purge_run(purge_of(store, "old"))
    assert "old" not in ids(store.retention_candidates("t1", status="completed",
                                                       ended_before=T0 + 10))


def test_a_purge_replaces_payloads_and_removes_what_the_run_held(store: Store) -> None:
    finish(store, "r1", status="failed", error="card 4111 declined")
    finish(store, "r2")
    before = store.load_events("t1", "r1")
    assert store.purge_run(purge_of(store, "r1")) == "purged"
    after = store.load_events("t1", "r1")
    assert [(e.seq, e.type, e.hash) for e in after] == [(e.seq, e.type, e.hash) for e in before]
    assert [e.payload for e in after] == [b"tomb1", b"tomb2"]
    assert store.load_checkpoint("t1", "r1") is None
    assert store.pending_signals("t1", "r1") == []
    row = store.get_run("t1", "r1")
    assert row is not None and row.error is None and row.status == "failed"
    assert store.purged_runs("t1") == [
        PurgedRun("t1", "r1", "s1", T0 + 100, 2, "retention.completed = 1d")]
    # The other run is untouched.
    assert store.load_checkpoint("t1", "r2") == (2, b"cp")
    assert len(store.pending_signals("t1", "r2")) == 1
    assert store.purge_run(purge_of(store, "r1")) == "already"


def test_a_held_run_is_not_purged(store: Store) -> None:
    finish(store, "r1")
    finish(store, "r2", subject="ann")
    finish(store, "r3", subject="bob")
    store.put_hold(HoldRecord("t1", "run", "r1", "case 7", "legal", T0))
    store.put_hold(HoldRecord("t1", "subject", "ann", "case 8", "legal", T0))
    store.put_hold(HoldRecord("t2", "subject", "bob", "another tenant's", "legal", T0))
    for run_id in ("r1", "r2"):
        before = store.load_events("t1", run_id)
        assert store.purge_run(purge_of(store, run_id)) == "held"
        assert store.load_events("t1", run_id) == before
        assert store.load_checkpoint("t1", run_id) == (2, b"cp")
    assert store.purge_run(purge_of(store, "r3")) == "purged"
    assert store.runs_of_subject("t1", "bob") == []  # a purged run is about nobody
    assert [r.run_id for r in store.runs_of_subject("t1", "ann")] == ["r2"]
    store.release_hold("t1", "run", "r1", by="legal", at=T0 + 9)
    assert store.purge_run(purge_of(store, "r1")) == "purged"
    assert sorted(p.run_id for p in store.purged_runs("t1")) == ["r1", "r3"]


def test_a_purge_of_a_changed_run_changes_nothing(store: Store) -> None:
    finish(store, "r1")
    create(store, "live")
    good = purge_of(store, "r1")
    stale = Purge("t1", "r1", 2, [good.tombstones[0],
                                  StoredEvent(2, good.tombstones[1].type, b"x",
                                              fake_hash("other"))],
                  "s1", T0, "rule")
    short = Purge("t1", "r1", 1, good.tombstones[:1], "s1", T0, "rule")
    before = store.load_events("t1", "r1")
    for bad in (stale, short, purge_of(store, "live"), purge_of(store, "gone")):
        with pytest.raises(ConflictError, match="nothing was purged"):
            store.purge_run(bad)
    assert store.load_events("t1", "r1") == before
    assert store.load_checkpoint("t1", "r1") == (2, b"cp")
    assert store.purged_runs("t1") == []


def test_purges_are_listed_newest_first_by_sweep(store: Store) -> None:
    for i, run_id in enumerate(("r1", "r2", "r3")):
        finish(store, run_id)
        purge = purge_of(store, run_id, sweep="s2" if run_id == "r3" else "s1")
        store.purge_run(Purge(purge.tenant_id, run_id, purge.last_seq, purge.tombstones,
                              purge.sweep_id, T0 + i, purge.rule))
    assert ids(store.purged_runs("t1")) == ["r3", "r2", "r1"]
    assert ids(store.purged_runs("t1", sweep_id="s1")) == ["r2", "r1"]
    assert ids(store.purged_runs("t1", limit=1)) == ["r3"]
    assert ids(store.purged_runs("t1", run_id="r2")) == ["r2"]
    assert store.purged_runs("t1", run_id="r9") == []
    assert store.purged_runs("t2") == []


def test_blobs_are_listed_in_pages_and_deleted_only_when_idle(store: Store) -> None:
    for k in ("k3", "k1", "k2"):
        create(store, f"r-{k}", blobs={k: k.encode()})
    create(store, "elsewhere", tenant="t2", blobs={"k1": b"k1"})
    assert store.blob_keys("t1") == ["k1", "k2", "k3"]
    assert store.blob_keys("t1", after="k1", limit=1) == ["k2"]
    # Just written: not idle for an hour.
    assert store.delete_blobs("t1", ["k1", "k2"], idle=3600) == 0
    assert store.delete_blobs("t1", ["k1", "k2", "missing"], idle=-60) == 2
    assert store.blob_keys("t1") == ["k3"]
    assert store.get_blobs("t2", ["k1"]) == {"k1": b"k1"}
    assert store.delete_blobs("t1", [], idle=0) == 0


def test_a_blob_sent_again_is_written_again_once_its_mark_is_a_day_old(
    backend: Backend, store: Store,
) -> None:
    create(store, "r1", blobs={"k": b"v"})
    age_blobs(backend, store, 3600)
    create(store, "r2", blobs={"k": b"v"})  # sent an hour later: the mark stands
    assert store.delete_blobs("t1", ["k"], idle=1800) == 1
    create(store, "r3", blobs={"k": b"v"})
    age_blobs(backend, store, 2 * 86_400)
    create(store, "r4", blobs={"k": b"v"})  # over a day later: written again now
    assert store.delete_blobs("t1", ["k"], idle=86_400) == 0
    assert store.get_blobs("t1", ["k"]) == {"k": b"v"}


def age_blobs(backend: Backend, store: Store, seconds: float) -> None:
    """Move every blob's written mark ``seconds`` into the past (as time passing would)."""
    if backend.in_memory:
        for memory in backend.memories(store):
            for key in memory._written:
                memory._written[key] -= seconds
    elif backend.name == "sqlite":
        assert backend.url is not None
        with sqlite3.connect(backend.url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE blobs SET written_at = written_at - ?", (seconds,))
    else:
        assert backend.direct_url is not None
        base, schema = backend.direct_url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'UPDATE "{schema}".blobs SET written_at = written_at - %s',
                         (seconds,))


def test_the_sweep_log_records_each_sweep_per_tenant(store: Store) -> None:
    store.record_sweep(SweepRecord("s1", "t1", T0, "worker w1"))
    store.record_sweep(SweepRecord("s1", "t2", T0, "worker w1"))
    store.record_sweep(SweepRecord("s2", "t1", T0 + 10, "cli"))
    done = SweepRecord("s1", "t1", T0, "worker w1", T0 + 5, purged=3, held=1, skipped=2,
                       blobs_deleted=7, collected_at=T0 + 4)
    store.record_sweep(done)
    assert store.list_sweeps("t1") == [SweepRecord("s2", "t1", T0 + 10, "cli"), done]
    assert [(s.sweep_id, s.tenant_id) for s in store.list_sweeps()] == [
        ("s2", "t1"), ("s1", "t1"), ("s1", "t2")]
    assert store.list_sweeps("t1", limit=1) == [SweepRecord("s2", "t1", T0 + 10, "cli")]
    assert store.list_sweeps("t3") == []
