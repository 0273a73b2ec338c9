"""The approvers registry on every backend: approvers read back exactly, listed by id and
kept per tenant; the first revocation stands and registering again lifts it."""

from __future__ import annotations

import base64

from underway.guard.approvals import ApproverRecord
from underway.store import Store

# The store keeps public keys as given; checking them is the registry's job.
KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = base64.b64encode(bytes([7] * 32)).decode()


def alice(**changes: object) -> ApproverRecord:
    fields: dict[str, object] = {
        "tenant_id": "acme", "approver_id": "alice", "public_key": KEY_A,
        "roles": ("finance", "ops"), "created_at": 100.0,
    }
    fields.update(changes)
    return ApproverRecord(**fields)  # type: ignore[arg-type]


def test_an_approver_is_stored_and_read_back_exactly(store: Store) -> None:
    assert store.get_approver("acme", "alice") is None
    store.put_approver(alice())
    assert store.get_approver("acme", "alice") == alice()
    assert store.list_approvers("acme") == [alice()]


def test_approvers_are_listed_by_id_and_kept_per_tenant(store: Store) -> None:
    store.put_approver(alice(approver_id="zoe", roles=()))
    store.put_approver(alice())
    store.put_approver(alice(tenant_id="globex", approver_id="mallory", public_key=KEY_B))
    assert [a.approver_id for a in store.list_approvers("acme")] == ["alice", "zoe"]
    assert store.list_approvers("acme")[1].roles == ()
    assert [a.approver_id for a in store.list_approvers("globex")] == ["mallory"]
    assert store.get_approver("globex", "alice") is None
    assert store.list_approvers("initech") == []


def test_revoking_stamps_the_first_time_and_registering_again_lifts_it(store: Store) -> None:
    store.put_approver(alice())
    assert store.revoke_approver("acme", "alice", at=200.0) is True
    assert store.get_approver("acme", "alice") == alice(revoked_at=200.0)
    assert store.revoke_approver("acme", "alice", at=300.0) is False  # already revoked
    assert store.get_approver("acme", "alice") == alice(revoked_at=200.0)
    assert store.revoke_approver("acme", "nobody", at=300.0) is False
    assert store.revoke_approver("globex", "alice", at=300.0) is False

    store.put_approver(alice(public_key=KEY_B, roles=("ops",), created_at=400.0))
    assert store.get_approver("acme", "alice") == alice(
        public_key=KEY_B, roles=("ops",), created_at=400.0
    )
