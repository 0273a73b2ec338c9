"""API keys and intake webhook secrets on every backend: keys read back exactly by id, listed
per tenant oldest first, revoked once and only in their own tenant; an id cannot be reused;
a source's secret is set, replaced, listed and removed per tenant."""

from __future__ import annotations

import pytest

from underway.errors import ConflictError
from underway.store import Store
from underway.store.base import ApiKeyRecord, IntakeSecretRecord


def key(**changes: object) -> ApiKeyRecord:
    fields: dict[str, object] = {
        "key_id": "k1", "tenant_id": "acme", "role": "viewer", "name": "dashboard",
        "token_hash": "ab" * 32, "created_at": 100.0,
    }
    fields.update(changes)
    return ApiKeyRecord(**fields)  # type: ignore[arg-type]


def test_a_key_is_stored_and_read_back_exactly(store: Store) -> None:
    assert store.get_api_key("k1") is None
    store.put_api_key(key())
    assert store.get_api_key("k1") == key()


def test_a_key_id_cannot_be_reused_and_the_first_key_stands(store: Store) -> None:
    store.put_api_key(key())
    with pytest.raises(ConflictError):
        store.put_api_key(key(tenant_id="globex", role="admin"))
    assert store.get_api_key("k1") == key()


def test_a_key_id_cannot_be_reused_by_a_tenant_of_another_region(store: Store) -> None:
    store.put_api_key(key())
    with pytest.raises(ConflictError):
        store.put_api_key(key(tenant_id="t2", role="admin"))
    assert store.get_api_key("k1") == key()
    assert store.list_api_keys("t2") == []


def test_keys_are_listed_per_tenant_oldest_first(store: Store) -> None:
    store.put_api_key(key(key_id="k2", created_at=200.0))
    store.put_api_key(key())
    store.put_api_key(key(key_id="k3", tenant_id="globex", created_at=50.0))
    assert [k.key_id for k in store.list_api_keys("acme")] == ["k1", "k2"]
    assert [k.key_id for k in store.list_api_keys("globex")] == ["k3"]
    assert [k.key_id for k in store.list_api_keys()] == ["k3", "k1", "k2"]
    assert store.list_api_keys("initech") == []


def test_revoking_stamps_the_first_time_and_only_in_the_keys_tenant(store: Store) -> None:
    store.put_api_key(key())
    assert store.revoke_api_key("globex", "k1", at=150.0) is False
    assert store.get_api_key("k1") == key()
    assert store.revoke_api_key("acme", "k1", at=200.0) is True
    assert store.revoke_api_key("acme", "k1", at=300.0) is False
    assert store.get_api_key("k1") == key(revoked_at=200.0)
    assert store.revoke_api_key("acme", "nobody", at=300.0) is False


def test_intake_secrets_are_set_replaced_listed_and_removed_per_tenant(store: Store) -> None:
    assert store.get_intake_secret("acme", "billing") is None
    first = IntakeSecretRecord("acme", "billing", "s3cret", 100.0)
    store.put_intake_secret(first)
    assert store.get_intake_secret("acme", "billing") == first
    assert store.get_intake_secret("globex", "billing") is None
    second = IntakeSecretRecord("acme", "billing", "rotated", 200.0)
    store.put_intake_secret(second)
    store.put_intake_secret(IntakeSecretRecord("acme", "alerts", "a", 300.0))
    store.put_intake_secret(IntakeSecretRecord("globex", "billing", "g", 300.0))
    assert store.get_intake_secret("acme", "billing") == second
    assert [s.source for s in store.list_intake_secrets("acme")] == ["alerts", "billing"]
    assert store.delete_intake_secret("globex", "alerts") is False
    assert store.delete_intake_secret("acme", "billing") is True
    assert store.delete_intake_secret("acme", "billing") is False
    assert store.get_intake_secret("acme", "billing") is None
    assert store.get_intake_secret("globex", "billing") is not None
