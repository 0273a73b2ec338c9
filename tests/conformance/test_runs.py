"""The run index on every backend: rows by tenant, listings, and every journal an audit
must visit."""

from __future__ import annotations

import pytest
from builders import T0, batch, create, fake_hash, lease_of, signal

from underway.errors import RunNotFound
from underway.store import Lease, RunUpdate, Store


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


def test_journaled_runs_include_journals_without_a_row(store: Store, backend: object) -> None:
    create(store, "r1")
    create(store, "r2", tenant="t2")
    assert store.journaled_runs() == [("t1", "r1"), ("t2", "r2")]
    assert store.journaled_runs("t2") == [("t2", "r2")]


def test_journal_heads_are_the_last_event_of_every_journal(store: Store, backend: object) -> None:
    create(store, "r1")
    create(store, "r2", tenant="t2")
    store.append(batch(lease_of(store, "r1"), 1, count=2))
    assert store.journal_heads() == [("t1", "r1", 3, fake_hash("r13")),
                                    ("t2", "r2", 1, fake_hash("r21"))]
    assert store.journal_heads("t2") == [("t2", "r2", 1, fake_hash("r21"))]
    assert store.journal_heads("nobody") == []
