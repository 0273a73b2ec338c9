"""The storage contract every backend keeps: idempotent creation, fenced atomic appends,
leases, tenant isolation, checkpoints, blobs and the signal inbox."""

from __future__ import annotations

import pytest

from underway.errors import ConflictError, FencedError, RunNotFound
from underway.store import (
    AppendBatch,
    Lease,
    NewRun,
    RunRecord,
    RunUpdate,
    SignalRecord,
    Store,
    StoredEvent,
)

T0 = 1_000.0


def event(seq: int, run_id: str = "r1", kind: str = "StepCompleted") -> StoredEvent:
    return StoredEvent(seq, kind, f'{{"seq":{seq},"run":"{run_id}"}}'.encode(), f"h{run_id}{seq}")


def create(
    store: Store,
    run_id: str = "r1",
    *,
    tenant: str = "t1",
    key: str | None = None,
    flow: str = "f",
    now: float = T0,
    wake: float = T0,
    blobs: dict[str, bytes] | None = None,
) -> tuple[RunRecord, bool]:
    return store.create_run(NewRun(
        tenant_id=tenant, run_id=run_id, flow=flow, idempotency_key=key,
        first_event=event(1, run_id, "RunStarted"), blobs=blobs or {}, step="start", now=now,
        next_wake_at=wake,
    ))


def lease_of(
    store: Store, run_id: str = "r1", *, tenant: str = "t1", owner: str = "w1",
    now: float = T0, ttl: float = 30.0,
) -> Lease:
    leases = store.claim(owner=owner, now=now, ttl=ttl, tenant_id=tenant, run_id=run_id)
    assert len(leases) == 1, f"{run_id} was not claimable"
    return leases[0]


def batch(
    lease: Lease,
    after: int,
    *,
    count: int = 1,
    update: RunUpdate | None = None,
    now: float = T0 + 1,
    blobs: dict[str, bytes] | None = None,
    checkpoint: tuple[int, bytes] | None = None,
    consumed: list[str] | None = None,
    release: bool = False,
    expected: int | None = None,
    fence: int | None = None,
) -> AppendBatch:
    return AppendBatch(
        tenant_id=lease.tenant_id, run_id=lease.run_id,
        expected_seq=after if expected is None else expected,
        fence=lease.token if fence is None else fence,
        events=[event(after + i + 1, lease.run_id) for i in range(count)], now=now,
        update=update or RunUpdate("ready", "next", now),
        blobs=blobs or {}, checkpoint=checkpoint, consumed_signals=consumed or [],
        release=release,
    )


def signal(
    name: str, signal_id: str, *, run_id: str = "r1", tenant: str = "t1", at: float = T0 + 5
) -> SignalRecord:
    return SignalRecord(tenant, run_id, signal_id, name, b'{"ok":true}', "tester", at)


def seqs(store: Store, run_id: str = "r1", tenant: str = "t1") -> list[int]:
    return [e.seq for e in store.load_events(tenant, run_id)]


WAIT_GO = RunUpdate("waiting", "after", None, "go")


# -- schema and creation ---------------------------------------------------------------
def test_migrate_is_repeatable(store: Store) -> None:
    version = store.schema_version()
    assert version >= 1
    assert store.migrate() == version
    assert store.schema_version() == version


def test_create_run_stores_row_first_event_and_blobs(store: Store) -> None:
    run, created = create(store, blobs={"k1": b"blob-1"}, wake=T0 + 3)
    assert created
    assert (run.tenant_id, run.run_id, run.flow, run.status, run.step) == (
        "t1", "r1", "f", "ready", "start")
    assert (run.last_seq, run.last_hash, run.next_wake_at) == (1, "hr11", T0 + 3)
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


# -- appends ---------------------------------------------------------------------------
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
    assert (run.last_seq, run.last_hash) == (4, "hr14")
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


# -- leases ----------------------------------------------------------------------------
def test_a_leased_run_is_not_claimable_until_its_lease_expires(store: Store) -> None:
    create(store)
    held = lease_of(store, owner="w1", ttl=30)
    assert held.token == 1 and held.expires_at == T0 + 30
    assert store.claim(owner="w2", now=T0 + 29, ttl=30) == []
    assert store.claim(owner="w2", now=T0 + 30, ttl=30) == []  # expiry is exclusive
    [taken] = store.claim(owner="w2", now=T0 + 31, ttl=30)
    assert (taken.owner, taken.token, taken.expires_at) == ("w2", 2, T0 + 61)
    run = store.get_run("t1", "r1")
    assert run is not None and (run.lease_owner, run.lease_token) == ("w2", 2)


def test_lease_takeover_fences_the_old_holder(store: Store) -> None:
    create(store)
    old = lease_of(store, owner="w1", ttl=10)
    [new] = store.claim(owner="w2", now=T0 + 11, ttl=30)
    with pytest.raises(FencedError):
        store.append(batch(old, 1, now=T0 + 12))
    assert store.renew(old, now=T0 + 12, ttl=30) is None
    store.release(old)  # releasing a lost lease must not free the new holder's
    assert store.claim(owner="w3", now=T0 + 12, ttl=30) == []
    store.append(batch(new, 1, now=T0 + 12))
    assert seqs(store) == [1, 2]


def test_renew_extends_and_release_frees_a_lease(store: Store) -> None:
    create(store)
    lease = lease_of(store, ttl=10)
    renewed = store.renew(lease, now=T0 + 8, ttl=10)
    assert renewed is not None and renewed.expires_at == T0 + 18
    assert renewed.token == lease.token
    assert store.claim(owner="w2", now=T0 + 15, ttl=10) == []
    store.release(renewed)
    [again] = store.claim(owner="w2", now=T0 + 15, ttl=10)
    assert again.token == lease.token + 1


def test_claim_takes_only_due_unfinished_runs_in_wake_order(store: Store) -> None:
    create(store, "late", wake=T0 + 5)
    create(store, "early", wake=T0 - 5)
    create(store, "future", wake=T0 + 100)
    create(store, "done", wake=T0 - 10)
    store.append(batch(lease_of(store, "done", now=T0 - 10), 1,
                       update=RunUpdate("completed", None, None), release=True))
    create(store, "parked", wake=T0 - 10)
    store.append(batch(lease_of(store, "parked", now=T0 - 10), 1, update=WAIT_GO,
                       release=True))
    leases = store.claim(owner="w", now=T0 + 10, ttl=30, limit=10)
    assert [x.run_id for x in leases] == ["early", "late"]
    assert store.claim(owner="w", now=T0 + 10, ttl=30) == []


def test_claim_honours_limit_tenant_and_run(store: Store) -> None:
    for run_id in ("a", "b", "c"):
        create(store, run_id)
    create(store, "x", tenant="t2")
    assert len(store.claim(owner="w", now=T0, ttl=30, limit=2, tenant_id="t1")) == 2
    assert [x.run_id for x in store.claim(owner="w", now=T0, ttl=30, tenant_id="t2",
                                          limit=5)] == ["x"]
    assert store.claim(owner="w", now=T0, ttl=30, tenant_id="t2", run_id="x") == []
    [last] = store.claim(owner="w", now=T0, ttl=30, limit=5)
    assert last.tenant_id == "t1" and last.run_id in ("a", "b", "c")


def test_held_leases_and_expire_lease(store: Store) -> None:
    create(store, "r1")
    create(store, "r2")
    lease_of(store, "r1", owner="dead", ttl=30)
    lease_of(store, "r2", owner="alive", ttl=5)
    assert sorted(store.held_leases(now=T0 + 1)) == [("t1", "r1", "dead"), ("t1", "r2", "alive")]
    assert store.held_leases(now=T0 + 10) == [("t1", "r1", "dead")]
    assert store.expire_lease("t1", "r1", "someone-else") == 0
    assert store.expire_lease("t1", "r1", "dead") == 1
    assert store.held_leases(now=T0 + 1) == [("t1", "r2", "alive")]
    [taken] = store.claim(owner="w2", now=T0 + 1, ttl=30, run_id="r1", tenant_id="t1")
    assert taken.token == 2


def test_next_wake_at_is_the_earliest_unfinished_run(store: Store) -> None:
    assert store.next_wake_at() is None
    create(store, "r1", wake=T0 + 50)
    create(store, "r2", wake=T0 + 20, tenant="t2")
    assert store.next_wake_at() == T0 + 20
    store.append(batch(lease_of(store, "r2", tenant="t2", now=T0 + 20), 1,
                       update=RunUpdate("completed", None, None), release=True))
    assert store.next_wake_at() == T0 + 50


# -- tenants ---------------------------------------------------------------------------
def test_another_tenant_sees_nothing(store: Store) -> None:
    create(store, "r1", blobs={"k": b"v"})
    lease = lease_of(store)
    store.append(batch(lease, 1, checkpoint=(2, b"cp")))
    store.send_signal(signal("go", "s1"))
    assert store.get_run("t2", "r1") is None
    assert store.load_events("t2", "r1") == []
    assert store.load_checkpoint("t2", "r1") is None
    assert store.pending_signals("t2", "r1") == []
    assert store.get_blobs("t2", ["k"]) == {}
    assert store.list_runs("t2") == []
    assert store.claim(owner="w", now=T0 + 100, ttl=1, tenant_id="t2") == []
    assert store.delete_checkpoints("t2") == 0
    assert store.load_checkpoint("t1", "r1") == (2, b"cp")
    with pytest.raises(RunNotFound):
        store.append(batch(Lease("t2", "r1", "w1", lease.token, T0 + 30), 2))


def test_list_runs_and_tenants(store: Store) -> None:
    create(store, "old", now=T0)
    create(store, "b-new", now=T0 + 1)
    create(store, "a-new", now=T0 + 1)
    create(store, "other", tenant="t0")
    store.append(batch(lease_of(store, "old"), 1, update=RunUpdate("completed", None, None),
                       release=True))
    assert [r.run_id for r in store.list_runs("t1")] == ["a-new", "b-new", "old"]
    assert [r.run_id for r in store.list_runs("t1", limit=1)] == ["a-new"]
    assert [r.run_id for r in store.list_runs("t1", status="completed")] == ["old"]
    assert store.list_runs("t1", status="failed") == []
    assert store.tenants() == ["t0", "t1"]


# -- signals ---------------------------------------------------------------------------
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
    assert run is not None and (run.last_seq, run.last_hash, run.status) == (4, "hr14", "waiting")
    assert run.lease_owner is None


def test_journaled_runs_include_journals_without_a_row(store: Store, backend: object) -> None:
    create(store, "r1")
    create(store, "r2", tenant="t2")
    assert store.journaled_runs() == [("t1", "r1"), ("t2", "r2")]
    assert store.journaled_runs("t2") == [("t2", "r2")]


def test_journal_heads_are_the_last_event_of_every_journal(store: Store, backend: object) -> None:
    create(store, "r1")
    create(store, "r2", tenant="t2")
    store.append(batch(lease_of(store, "r1"), 1, count=2))
    assert store.journal_heads() == [("t1", "r1", 3, "hr13"), ("t2", "r2", 1, "hr21")]
    assert store.journal_heads("t2") == [("t2", "r2", 1, "hr21")]
    assert store.journal_heads("nobody") == []
