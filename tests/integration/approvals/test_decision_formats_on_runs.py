"""Held runs on SQLite and PostgreSQL: a decision over JCS from the Python client and one
in the format before JCS (as an approver's older tool still signs it) both pass the API, the
run's verification and the last check before the tool runs; either one relabelled as the
other format is refused by the API with nothing stored."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.service_world import World
from underway.events import canonical_json
from underway.guard.approvals import SignedDecision, verify_decision
from underway.guard.approvals.decision import LEGACY_DOMAIN, ApprovalCheck


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    w = World(str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                          else "pg_url")))
    yield w
    w.close()


def signed_before_jcs(key: Ed25519PrivateKey, pending: dict[str, Any]) -> dict[str, Any]:
    """A decision as underway signed it before JCS: no ``canon``, the old tag, underway's
    own canonical JSON."""
    fields = {"request_id": pending["request_id"], "run_id": pending["run_id"],
              "tenant_id": "acme", "tool": pending["tool"], "args_hash": pending["args_hash"],
              "decision": "approve", "expires_at": float(pending["expires_at"]),
              "nonce": "5a" * 16, "approver_id": "alice", "comment": "signed the old way",
              "answer": None}
    signature = key.sign(LEGACY_DOMAIN + canonical_json(fields))
    return {**fields, "signature": base64.b64encode(signature).decode()}


def post(world: World, run_id: str, decision: dict[str, Any]) -> tuple[int, str]:
    r = world.call("POST", f"/v1/approvals/{run_id}/decision", role="approver",
                   json=decision)
    return r.status_code, r.text


def granted(world: World, run_id: str) -> SignedDecision:
    log = world.call("GET", f"/v1/runs/{run_id}/events").json()
    [event] = [e for e in log if e["type"] == "ApprovalGranted"]
    assert log[-1]["type"] == "RunCompleted"
    return SignedDecision.model_validate(event["data"]["decision"])


def test_both_formats_pass_every_check_and_relabelling_either_fails(world: World) -> None:
    alice = world.approver("acme", "alice", "finance")
    new_run = world.start("refunds", "INV-1")
    old_run = world.start("refunds", "INV-2")
    [new_pending] = world.client_pending(new_run)
    [old_pending] = world.client_pending(old_run)

    client = uw.Client(world.store, clock=world.clock)
    jcs = client.decide(new_run, "approve", key=alice, approver_id="alice", comment="ok ✓",
                        tenant_id="acme")
    assert jcs.canon == "jcs"
    old = signed_before_jcs(alice, old_pending)

    # Relabelled as the other format, or tampered with: refused, nothing stored.
    wire = jcs.model_dump(mode="json")
    without_canon = {k: v for k, v in wire.items() if k != "canon"}
    for run_id, forged in ((old_run, {**old, "canon": "jcs"}),
                           (old_run, {**old, "comment": "signed the old way!"}),
                           (new_run, {**wire, "canon": None}),
                           (new_run, without_canon),
                           (new_run, {**wire, "comment": "ok ✓!"})):
        status, text = post(world, run_id, forged)
        assert status == 422 and "bad_signature" in text, (forged, text)
    assert world.store.pending_signals("acme", old_run) == []
    assert len(world.store.pending_signals("acme", new_run)) == 1  # the genuine one

    assert post(world, old_run, old)[0] == 202
    world.drive()
    for run_id, pending, canon in ((new_run, new_pending, "jcs"), (old_run, old_pending, None)):
        assert world.call("GET", f"/v1/runs/{run_id}").json()["status"] == "completed"
        d = granted(world, run_id)
        assert d.canon == canon
        check = ApprovalCheck(request_id=pending["request_id"], run_id=run_id,
                              tenant_id="acme", tool="refund", args_hash=pending["args_hash"],
                              required_role="finance", expires_at=pending["expires_at"])
        assert verify_decision(d, check=check, approver=world.store.get_approver(
            "acme", "alice"), now=world.clock.now()) is None
