"""Signed decisions across SIGKILLs, on SQLite and PostgreSQL: two held refunds, one
approved by a decision signed before JCS and one by a decision over JCS. Worker processes
kill themselves at every fault point in turn (the 1st pass, then the 2nd, ...) until one
finishes. Nothing is lost, no refund is made twice, both runs complete, and each journal
holds its decision in the format it was signed in, still verifying.

A kill between the refund's intent and its outcome leaves an unknown outcome: the
reconcile hook settles it from the outside system's record, or the refund runs again
through the whole guard, its journaled decision verified again first.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.processes import CHILD_TIMEOUT_S
from underway import events as ev
from underway.events import canonical_json
from underway.guard.approvals import (
    ApprovalCheck,
    SignedDecision,
    public_key_of,
    register_approver,
    sign_decision,
    verify_decision,
)
from underway.guard.approvals.decision import LEGACY_DOMAIN

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("decisions_worker.py")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
TENANT = "acme"
BEFORE_JCS, JCS = "refund-before-jcs", "refund-jcs"
MAX_CHILDREN = 60


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_url" if request.param == "postgres"
                                       else "sqlite_url"))


def child(url: str, effects: Path, mode: str, crash_after: int | None = None
          ) -> tuple[int, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env["UNDERWAY_CRASH_AFTER"] = str(crash_after)
    out = subprocess.run([sys.executable, str(WORKER), "--db", url, "--effects", str(effects),
                          mode], env=env, capture_output=True, text=True,
                         timeout=CHILD_TIMEOUT_S, check=False)
    if out.returncode == -signal.SIGKILL:
        return out.returncode, {}
    assert out.returncode == 0, out.stderr
    return 0, json.loads(out.stdout.splitlines()[-1])


def signed_before_jcs(key: Ed25519PrivateKey, r: uw.PendingRequest) -> dict[str, Any]:
    """A decision as underway signed it before JCS: no ``canon``, the old tag, underway's
    own canonical JSON."""
    fields = {"request_id": r.request_id, "run_id": r.run_id, "tenant_id": TENANT,
              "tool": r.tool, "args_hash": r.args_hash, "decision": "approve",
              "expires_at": float(r.expires_at), "nonce": "5a" * 16, "approver_id": "alice",
              "comment": "signed before JCS", "answer": None}
    signature = base64.b64encode(key.sign(LEGACY_DOMAIN + canonical_json(fields))).decode()
    return {**fields, "signature": signature}


def hidden_then_settled(history: list[ev.Event]) -> bool:
    """Whether a worker restarted between the refund's intent and its outcome."""
    kinds = [type(e) for e in history]
    started = kinds.index(ev.ToolStarted)
    settled = next(i for i, k in enumerate(kinds)
                   if k in (ev.ToolSucceeded, ev.ToolReconciled))
    return ev.StepStarted in kinds[started:settled]


def test_decisions_of_both_formats_survive_sigkill_anywhere(store_url: str,
                                                             tmp_path: Path) -> None:
    effects = tmp_path / "refunds.log"
    assert child(store_url, effects, "start")[1]["statuses"] == {BEFORE_JCS: "waiting",
                                                                 JCS: "waiting"}
    store = uw.connect(store_url)
    try:
        client = uw.Client(store)
        alice = Ed25519PrivateKey.generate()
        register_approver(store, "alice", public_key=public_key_of(alice), roles=["finance"],
                          now=client.clock.now(), tenant_id=TENANT)
        requests = {r: client.pending_request(r, tenant_id=TENANT) for r in (BEFORE_JCS, JCS)}
        old = requests[BEFORE_JCS]
        new = requests[JCS]
        assert old is not None and new is not None
        assert client.submit_decision(signed_before_jcs(alice, old), tenant_id=TENANT)
        assert client.submit_decision(sign_decision(
            alice, request_id=new.request_id, run_id=JCS, tenant_id=TENANT, tool=new.tool,
            args_hash=new.args_hash, decision="approve", expires_at=new.expires_at,
            approver_id="alice", comment="signed over JCS").model_dump(mode="json"),
            tenant_id=TENANT)

        kills = 0
        for crash_after in range(1, MAX_CHILDREN + 1):
            code, report = child(store_url, effects, "work", crash_after)
            made = effects.read_text().split() if effects.exists() else []
            assert len(made) == len(set(made)), f"a refund was made twice: {made}"
            if code == 0:
                break
            kills += 1
        else:
            pytest.fail(f"no worker finished in {MAX_CHILDREN} tries")
        assert kills >= 5, kills  # the kills struck at many points, not only the last
        assert report["statuses"] == {BEFORE_JCS: "completed", JCS: "completed"}

        made = effects.read_text().split()
        assert len(made) == 2
        histories = {r: [rec.event for rec in uw.Engine(store).journal.history(TENANT, r)]
                     for r in (BEFORE_JCS, JCS)}
        # A kill hid a refund's outcome, and a restarted worker settled it (from the
        # outside record, or by running it again through the guard): never twice.
        assert any(hidden_then_settled(h) for h in histories.values()), histories
        for run_id, request, canon in ((BEFORE_JCS, old, None), (JCS, new, "jcs")):
            history = histories[run_id]
            [grant] = [e for e in history if isinstance(e, ev.ApprovalGranted)]
            d = SignedDecision.model_validate(grant.decision)
            assert d.canon == canon
            check = ApprovalCheck(request_id=request.request_id, run_id=run_id,
                                  tenant_id=TENANT, tool="refund", args_hash=request.args_hash,
                                  required_role="finance", expires_at=request.expires_at)
            assert verify_decision(d, check=check, approver=store.get_approver(TENANT, "alice"),
                                   now=client.clock.now()) is None
            [done] = [e for e in history if isinstance(e, ev.RunCompleted)]
            assert done.result == {"refunded": made[0] if made[0].startswith(run_id)
                                   else made[1]}
            assert not [e for e in history if isinstance(e, ev.ApprovalInvalid)]
    finally:
        store.close()
