"""The erasure log and a subject's keys on every backend: erasing a subject destroys every
key of its scope (and no other) in the same step as it logs the erasure; no key is added to
an erased subject's scope again, even by processes racing the erasure; the log is
append-only."""

from __future__ import annotations

import contextlib
import threading

import pytest
from store_backends import Backend, assert_append_only

from underway.errors import ConfigurationError, SubjectErased
from underway.store import Store
from underway.store.base import DataKeyRecord
from underway.store.records import ErasureRecord, subject_scope

SCOPE = subject_scope("cust-1")


def key(key_id: str, scope: str = SCOPE, tenant_id: str = "acme") -> DataKeyRecord:
    return DataKeyRecord(tenant_id, key_id, b"\x00wrapped-" + key_id.encode(), "kek-a", 100.0,
                         "active", scope)


def erasure(subject: str = "cust-1", tenant_id: str = "acme", **changes: object) -> ErasureRecord:
    fields: dict[str, object] = {
        "tenant_id": tenant_id, "subject": subject, "erased_at": 500.0, "by": "dpo",
        "reason": "request 7", "runs": 3, "knowledge": 1, "keys": 0, "vault": "destroyed",
    }
    fields.update(changes)
    return ErasureRecord(**fields)  # type: ignore[arg-type]


def test_erasing_destroys_every_key_of_the_subject_and_no_other(store: Store) -> None:
    store.add_data_key(key("s1"), replace=False)
    store.add_data_key(key("s2"), replace=True)  # a rotated subject key: both go
    store.add_data_key(key("t1", scope=""), replace=False)
    store.add_data_key(key("o1", scope=subject_scope("cust-2")), replace=False)
    store.add_data_key(key("g1", tenant_id="globex"), replace=False)
    logged = store.erase_subject(erasure())
    assert logged == erasure(keys=2, seq=logged.seq) and logged.seq >= 1
    states = {(k.tenant_id, k.key_id): (k.state, k.wrapped) for k in store.list_data_keys()}
    assert states[("acme", "s1")] == ("destroyed", b"")
    assert states[("acme", "s2")] == ("destroyed", b"")
    assert states[("acme", "t1")][0] == "active"
    assert states[("acme", "o1")][0] == "active"
    assert states[("globex", "g1")][0] == "active"  # the same subject id, another tenant


def test_no_key_is_added_for_an_erased_subject(store: Store) -> None:
    store.erase_subject(erasure(keys=0))
    for replace in (False, True):
        with pytest.raises(SubjectErased, match="cust-1"):
            store.add_data_key(key(f"late-{replace}"), replace=replace)
    assert store.active_data_key("acme", SCOPE) is None
    # Other subjects, the tenant's own scope and other tenants are untouched.
    store.add_data_key(key("other", scope=subject_scope("cust-2")), replace=False)
    store.add_data_key(key("mine", scope=""), replace=False)
    store.add_data_key(key("theirs", tenant_id="globex"), replace=False)


def test_the_log_is_listed_by_tenant_and_subject_oldest_first(store: Store) -> None:
    first = store.erase_subject(erasure("cust-1", erased_at=1.0))
    second = store.erase_subject(erasure("cust-2", erased_at=2.0))
    again = store.erase_subject(erasure("cust-1", erased_at=3.0, reason="second request"))
    other = store.erase_subject(erasure("cust-1", tenant_id="globex", erased_at=4.0))
    assert store.list_erasures("acme") == [first, second, again]
    assert store.list_erasures("acme", subject="cust-1") == [first, again]
    assert store.list_erasures(subject="cust-1") == [first, again, other]
    assert store.list_erasures("nobody") == []


def test_a_bad_vault_state_is_refused_before_anything_is_stored() -> None:
    with pytest.raises(ConfigurationError, match="vault"):
        erasure(vault="shredded")


def test_keys_racing_an_erasure_are_destroyed_or_refused(backend: Backend) -> None:
    stores = [backend.open() for _ in range(5)]
    barrier = threading.Barrier(len(stores))
    made: list[DataKeyRecord] = []

    def work(i: int) -> None:
        barrier.wait()
        if i == 0:
            stores[0].erase_subject(erasure())
            return
        with contextlib.suppress(SubjectErased):
            made.append(stores[i].add_data_key(key(f"k{i}"), replace=i % 2 == 0))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Whatever was added before the erasure was destroyed by it; nothing after it exists.
    assert all(k.state == "destroyed" for k in stores[0].list_data_keys("acme"))
    assert stores[0].active_data_key("acme", SCOPE) is None


def test_the_database_refuses_to_change_or_delete_an_erasure(backend: Backend,
                                                             store: Store) -> None:
    store.erase_subject(erasure())
    assert_append_only(backend, "erasures",
                       ("UPDATE erasures SET reason = 'x'", "DELETE FROM erasures"))
    assert [e.reason for e in store.list_erasures("acme")] == ["request 7"]
