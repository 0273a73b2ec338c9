"""Forgetting purged runs on every backend: the candidates (purged runs ended before a
time), one forget in one transaction deleting every row of the run and appending a line
to the tenant's hash-chained, append-only forget log — or nothing (held, not purged,
changed, forgotten already)."""

from __future__ import annotations

import pytest
from builders import T0, create, signal
from store_backends import Backend, assert_append_only
from test_retention import finish, ids, purge_of

from underway.errors import ConflictError
from underway.store import Store
from underway.store.base import Forget, HoldRecord, SweepRecord
from underway.store.retention import forget_genesis, forget_hash


def purged(store: Store, run_id: str, **kw: object) -> None:
    finish(store, run_id, **kw)  # type: ignore[arg-type]
    tenant = str(kw.get("tenant", "t1"))
    assert store.purge_run(purge_of(store, run_id, tenant=tenant)) == "purged"


def forget_of(store: Store, run_id: str, *, tenant: str = "t1", sweep: str = "w1",
              at: float = T0 + 500) -> Forget:
    row = store.get_run(tenant, run_id)
    assert row is not None
    return Forget(tenant, run_id, row.last_seq, row.last_hash, sweep, at)


def test_candidates_are_purged_runs_ended_before_a_time_oldest_first(store: Store) -> None:
    for run_id, at in (("b", T0 + 2), ("a", T0 + 2), ("old", T0 + 1), ("late", T0 + 50)):
        purged(store, run_id, at=at)
    purged(store, "kyc", at=T0 + 1, flow="kyc")
    purged(store, "other", at=T0 + 1, tenant="t2")
    finish(store, "kept", at=T0 + 1)  # finished, never purged
    assert ids(store.forget_candidates("t1", ended_before=T0 + 10)) == [
        "kyc", "old", "a", "b"]
    assert ids(store.forget_candidates("t1", ended_before=T0 + 10, flow="kyc")) == ["kyc"]
    first = store.forget_candidates("t1", ended_before=T0 + 10, limit=3)
    rest = store.forget_candidates("t1", ended_before=T0 + 10,
                                   after=(first[-1].updated_at, first[-1].run_id))
    assert ids(first) + ids(rest) == ["kyc", "old", "a", "b"]
    assert ids(store.forget_candidates("t2", ended_before=T0 + 10)) == ["other"]


def test_a_forget_deletes_every_row_of_the_run_and_logs_its_head(store: Store) -> None:
    purged(store, "r1", status="failed")
    purged(store, "r2")
    store.send_signal(signal("later", "s-after", run_id="r1", tenant="t1"))
    assert len(store.pending_signals("t1", "r1")) == 1
    store.advance_span_cursor("t1", "r1", 2)
    row = store.get_run("t1", "r1")
    assert row is not None
    assert store.forget_run(forget_of(store, "r1")) == "forgotten"
    assert store.get_run("t1", "r1") is None
    assert store.load_events("t1", "r1") == []
    assert store.purged_runs("t1", run_id="r1") == []
    assert store.pending_signals("t1", "r1") == []
    assert store.span_cursor("t1", "r1") == 0
    assert "r1" not in store.journaled_runs("t1")
    [line] = store.forgotten_runs("t1")
    assert (line.seq, line.run_id, line.last_seq, line.head, line.sweep_id,
            line.forgotten_at) == (1, "r1", 2, row.last_hash, "w1", T0 + 500)
    assert line.hash == forget_hash(forget_genesis("t1"), line)
    # The other run is untouched; the run once forgotten is gone.
    assert len(store.load_events("t1", "r2")) == 2
    assert ids(store.purged_runs("t1")) == ["r2"]
    assert store.forget_run(forget_of(store, "r2")) == "forgotten"
    assert store.forget_run(Forget("t1", "r1", 2, row.last_hash, "w2", T0)) == "gone"
    assert [f.run_id for f in store.forgotten_runs("t1")] == ["r1", "r2"]


def test_the_forget_log_is_a_chain_per_tenant(store: Store) -> None:
    for run_id in ("r1", "r2", "r3"):
        purged(store, run_id)
    purged(store, "x1", tenant="t2")
    for i, run_id in enumerate(("r2", "r1", "r3")):
        assert store.forget_run(forget_of(store, run_id, sweep="w2" if i else "w1",
                                          at=T0 + i)) == "forgotten"
    assert store.forget_run(forget_of(store, "x1", tenant="t2")) == "forgotten"
    log = store.forgotten_runs("t1")
    assert [(f.seq, f.run_id) for f in log] == [(1, "r2"), (2, "r1"), (3, "r3")]
    prev = forget_genesis("t1")
    for line in log:
        assert line.hash == forget_hash(prev, line)
        prev = line.hash
    assert [f.run_id for f in store.forgotten_runs("t1", after=1, limit=1)] == ["r1"]
    assert [f.run_id for f in store.forgotten_runs("t1", sweep_id="w2")] == ["r1", "r3"]
    [other] = store.forgotten_runs("t2")
    assert other.seq == 1 and other.hash == forget_hash(forget_genesis("t2"), other)
    assert store.forgotten_runs("t3") == []


def test_a_run_not_purged_held_or_changed_is_not_forgotten(store: Store) -> None:
    finish(store, "plain")
    assert store.forget_run(forget_of(store, "plain")) == "unpurged"
    purged(store, "held")
    purged(store, "ann", subject="ann")
    store.put_hold(HoldRecord("t1", "run", "held", "case 7", "legal", T0))
    assert store.forget_run(forget_of(store, "held")) == "held"
    purged(store, "moved")
    stale = forget_of(store, "moved")
    with pytest.raises(ConflictError):
        store.forget_run(Forget("t1", "moved", stale.last_seq, "0" * 64, "w1", T0))
    with pytest.raises(ConflictError):
        store.forget_run(Forget("t1", "moved", stale.last_seq + 1, stale.head, "w1", T0))
    for run_id in ("plain", "held", "moved"):
        assert store.get_run("t1", run_id) is not None
        assert len(store.load_events("t1", run_id)) == 2
    assert set(ids(store.purged_runs("t1"))) == {"held", "ann", "moved"}
    assert store.forgotten_runs("t1") == []
    store.release_hold("t1", "run", "held", by="legal", at=T0 + 9)
    assert store.forget_run(forget_of(store, "held")) == "forgotten"
    create(store, "live")
    assert store.forget_run(forget_of(store, "live")) == "unpurged"


def test_the_sweep_log_counts_the_runs_a_sweep_forgot(store: Store) -> None:
    done = SweepRecord("s1", "t1", T0, "cli", T0 + 5, purged=3, forgotten=2)
    store.record_sweep(done)
    assert store.list_sweeps("t1") == [done]


def test_the_database_refuses_to_change_or_delete_a_forget_log_line(
    backend: Backend, store: Store,
) -> None:
    purged(store, "r1")
    assert store.forget_run(forget_of(store, "r1")) == "forgotten"
    assert_append_only(backend, "forgotten_runs", (
        "UPDATE forgotten_runs SET run_id = 'x'", "DELETE FROM forgotten_runs"))
    assert ids(store.forgotten_runs("t1")) == ["r1"]
