"""Tenants' data keys on every backend: one active key per tenant and scope, a first key made
by racing processes ends up one key, a rotation retires the active key in the same step,
re-wrapping is compare-and-set on the KEK, a destroyed key keeps no bytes."""

from __future__ import annotations

import threading

import pytest
from store_backends import Backend

from underway.errors import ConflictError
from underway.store import Store
from underway.store.base import DataKeyRecord


def key(key_id: str = "k1", **changes: object) -> DataKeyRecord:
    fields: dict[str, object] = {
        "tenant_id": "acme", "key_id": key_id, "wrapped": b"\x00wrapped-" + key_id.encode(),
        "kek_id": "kek-a", "created_at": 100.0,
    }
    fields.update(changes)
    return DataKeyRecord(**fields)  # type: ignore[arg-type]


def test_a_first_key_is_made_active_once(store: Store) -> None:
    assert store.active_data_key("acme") is None
    assert store.add_data_key(key("k1"), replace=False) == key("k1")
    # Another process's first key loses: the active one is returned, nothing written.
    assert store.add_data_key(key("k2", created_at=101.0), replace=False) == key("k1")
    assert store.get_data_key("acme", "k2") is None
    assert store.active_data_key("acme") == key("k1")
    assert store.active_data_key("globex") is None


def test_a_rotation_retires_the_active_key_and_keeps_it(store: Store) -> None:
    store.add_data_key(key("k1"), replace=False)
    assert store.add_data_key(key("k2", created_at=200.0), replace=True) == \
        key("k2", created_at=200.0)
    assert store.active_data_key("acme") == key("k2", created_at=200.0)
    assert store.get_data_key("acme", "k1") == key("k1", state="retired")
    assert [(k.key_id, k.state) for k in store.list_data_keys("acme")] == [
        ("k1", "retired"), ("k2", "active")]
    with pytest.raises(ConflictError):
        store.add_data_key(key("k1", created_at=300.0), replace=True)
    assert store.active_data_key("acme") == key("k2", created_at=200.0)


def test_keys_are_per_tenant_and_scope(store: Store) -> None:
    store.add_data_key(key("k1"), replace=False)
    store.add_data_key(key("k1", tenant_id="globex"), replace=False)
    store.add_data_key(key("s1", scope="subject:42"), replace=False)
    assert store.active_data_key("acme") == key("k1")
    assert store.active_data_key("acme", "subject:42") == key("s1", scope="subject:42")
    assert [k.key_id for k in store.list_data_keys("globex")] == ["k1"]
    assert len(store.list_data_keys()) == 3


def test_rewrapping_is_compare_and_set_on_the_kek(store: Store) -> None:
    store.add_data_key(key("k1"), replace=False)
    assert not store.rewrap_data_key("acme", "k1", wrapped=b"new", kek_id="kek-b",
                                     expected_kek_id="kek-z")
    assert store.rewrap_data_key("acme", "k1", wrapped=b"new", kek_id="kek-b",
                                 expected_kek_id="kek-a")
    assert store.get_data_key("acme", "k1") == key("k1", wrapped=b"new", kek_id="kek-b")
    assert not store.rewrap_data_key("acme", "nope", wrapped=b"x", kek_id="kek-b",
                                     expected_kek_id="kek-b")


def test_a_destroyed_key_keeps_no_bytes_and_is_never_rewrapped(store: Store) -> None:
    store.add_data_key(key("k1"), replace=False)
    assert store.destroy_data_key("acme", "k1")
    assert not store.destroy_data_key("acme", "k1")
    assert store.get_data_key("acme", "k1") == key("k1", wrapped=b"", state="destroyed")
    assert store.active_data_key("acme") is None
    assert not store.rewrap_data_key("acme", "k1", wrapped=b"x", kek_id="kek-b",
                                     expected_kek_id="kek-a")


def test_racing_first_keys_end_as_one(backend: Backend) -> None:
    stores = [backend.open() for _ in range(4)]
    got: list[DataKeyRecord] = []
    barrier = threading.Barrier(len(stores))

    def make(i: int) -> None:
        barrier.wait()
        got.append(stores[i].add_data_key(key(f"k{i}"), replace=False))

    threads = [threading.Thread(target=make, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({k.key_id for k in got}) == 1
    assert len(stores[0].list_data_keys("acme")) == 1
