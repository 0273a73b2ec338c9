"""Run labels on every backend: written with the run (every way a run is created) and with
an append, found by one or several labels (AND), read back for a page of runs, kept per
tenant, and removed when the run is purged."""

from __future__ import annotations

import dataclasses

import pytest
from builders import T0, batch, event, lease_of
from test_retention import purge_of

from underway.errors import ConflictError
from underway.store import NewRun, RunUpdate, Store, StoredLabel
from underway.store.base import ForkLink, IntakeRequest

SKU_A = StoredLabel("sku", "A-7")
QTY_3 = StoredLabel("qty", "3", "int")
PAID = StoredLabel("paid", "true", "bool")
PATIENT = StoredLabel("patient", "Asha", "str", sensitive=True)


def new(run_id: str, *labels: StoredLabel, tenant: str = "t1", at: float = T0,
        key: str | None = None) -> NewRun:
    return NewRun(
        tenant_id=tenant, run_id=run_id, flow="f", idempotency_key=key,
        first_event=event(1, run_id, "RunStarted"), blobs={}, step="start", now=at,
        next_wake_at=at, labels=labels,
    )


def ids(store: Store, tenant: str = "t1", **labels: str) -> list[str]:
    return [r.run_id for r in store.list_runs(tenant, labels=labels)]


def test_labels_written_with_the_run_are_read_back_and_found(store: Store) -> None:
    store.create_run(new("r1", SKU_A, QTY_3, PATIENT))
    store.create_run(new("r2", StoredLabel("sku", "B-1"), QTY_3, at=T0 + 1))
    store.create_run(new("r3", at=T0 + 2))
    assert store.run_labels("t1", ["r1", "r2", "r3", "gone"]) == {
        "r1": (PATIENT, QTY_3, SKU_A),
        "r2": (QTY_3, StoredLabel("sku", "B-1")),
    }
    assert ids(store, sku="A-7") == ["r1"]
    assert ids(store, qty="3") == ["r2", "r1"]
    # Several labels must all match.
    assert ids(store, qty="3", sku="B-1") == ["r2"]
    assert ids(store, qty="3", sku="C-9") == []
    assert ids(store, qty="4") == []
    assert ids(store, nothing="3") == []
    # The other filters and the cursor still apply.
    assert [r.run_id for r in store.list_runs("t1", labels={"qty": "3"}, limit=1)] == ["r2"]
    assert [r.run_id for r in store.list_runs(
        "t1", labels={"qty": "3"}, after=(T0 + 1, "r2"))] == ["r1"]
    assert [r.run_id for r in store.list_runs("t1", labels={}, limit=5)] == ["r3", "r2", "r1"]


def test_labels_are_kept_per_tenant(store: Store) -> None:
    store.create_run(new("r1", SKU_A))
    store.create_run(new("r1", SKU_A, tenant="t2"))
    store.create_run(new("r2", SKU_A, tenant="t2"))
    assert ids(store, sku="A-7") == ["r1"]
    assert ids(store, "t2", sku="A-7") == ["r1", "r2"]
    assert store.run_labels("t1", ["r2"]) == {}


def test_a_start_found_by_its_key_writes_no_labels(store: Store) -> None:
    store.create_run(new("r1", SKU_A, key="k"))
    _, created = store.create_run(new("r2", PAID, key="k"))
    assert not created
    assert store.run_labels("t1", ["r1", "r2"]) == {"r1": (SKU_A,)}
    assert ids(store, paid="true") == []


def test_an_append_sets_labels_over_the_old_ones(store: Store) -> None:
    store.create_run(new("r1", SKU_A, QTY_3))
    lease = lease_of(store, "r1")
    store.append(dataclasses.replace(
        batch(lease, 1), labels=(StoredLabel("qty", "4", "int"), PAID)))
    assert store.run_labels("t1", ["r1"]) == {
        "r1": (PAID, StoredLabel("qty", "4", "int"), SKU_A)}
    assert ids(store, qty="3") == []
    assert ids(store, qty="4", paid="true") == ["r1"]


def test_a_refused_append_writes_no_labels(store: Store) -> None:
    store.create_run(new("r1", SKU_A))
    lease = lease_of(store, "r1")
    with pytest.raises(ConflictError):
        store.append(dataclasses.replace(batch(lease, 1, expected=5), labels=(PAID,)))
    assert store.run_labels("t1", ["r1"]) == {"r1": (SKU_A,)}


def test_every_way_a_run_is_created_writes_its_labels(store: Store) -> None:
    started = store.start_leased(new("leased", SKU_A), owner="w1", now=T0, ttl=30)
    assert started.created
    store.apply_intake(IntakeRequest(
        tenant_id="t1", idempotency_key="e1", entity_id="order-1", event_type="placed",
        now=T0, signal="placed", payload=b"{}", sender=None,
        new_run=new("intake", QTY_3)))
    store.create_run(new("parent"))
    store.append(batch(lease_of(store, "parent"), 1, release=True,
                       update=RunUpdate("completed", None, None)))
    store.fork_run(new("fork", PAID), ForkLink("t1", "parent", 2, event(3, "parent"), T0 + 5))
    assert store.run_labels("t1", ["leased", "intake", "fork"]) == {
        "leased": (SKU_A,), "intake": (QTY_3,), "fork": (PAID,)}


def test_a_purge_removes_the_runs_labels(store: Store) -> None:
    for run_id, at in (("r1", T0), ("r2", T0 + 1)):
        store.create_run(new(run_id, PATIENT, SKU_A, at=at))
        store.append(batch(lease_of(store, run_id, now=at), 1, release=True, now=at + 1,
                           update=RunUpdate("completed", None, None)))
    assert ids(store, patient="Asha") == ["r2", "r1"]
    assert store.purge_run(purge_of(store, "r1")) == "purged"
    assert store.run_labels("t1", ["r1", "r2"]) == {"r2": (PATIENT, SKU_A)}
    assert ids(store, patient="Asha") == ["r2"]
    assert ids(store, sku="A-7") == ["r2"]
