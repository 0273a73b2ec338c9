"""The approvers registry and decision nonces behave alike on every backend: tenants are
kept apart, re-registering lifts a revocation, and a nonce is accepted once per tenant even
when callers race for it."""

from __future__ import annotations

import base64
import threading
from concurrent.futures import ThreadPoolExecutor

from store_backends import Backend

from underway.approvals import ApproverRecord
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


def test_a_nonce_is_accepted_once_per_tenant(store: Store) -> None:
    assert store.use_nonce("acme", "n-1", run_id="r-1", request_id="q-1", at=1.0) is True
    # The same request again: a decision redelivered after a crash, not a replay.
    assert store.use_nonce("acme", "n-1", run_id="r-1", request_id="q-1", at=2.0) is True
    assert store.use_nonce("acme", "n-1", run_id="r-1", request_id="q-2", at=2.5) is False
    assert store.use_nonce("acme", "n-1", run_id="r-2", request_id="q-9", at=3.0) is False
    assert store.use_nonce("globex", "n-1", run_id="r-1", request_id="q-1", at=4.0) is True
    assert store.use_nonce("acme", "n-2", run_id="r-1", request_id="q-1", at=5.0) is True


def test_of_two_racing_callers_exactly_one_uses_the_nonce(backend: Backend) -> None:
    stores = [backend.open(), backend.open()]
    rounds = 40
    results: list[list[bool]] = [[] for _ in range(rounds)]
    barrier = threading.Barrier(2)

    def race(i: int) -> None:
        for n in range(rounds):
            barrier.wait()
            used = stores[i].use_nonce("acme", f"nonce-{n}", run_id=f"r-{i}",
                                       request_id="q", at=float(n))
            results[n].append(used)

    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(race, i) for i in range(2)]:
            f.result()
    assert all(sorted(r) == [False, True] for r in results), results
