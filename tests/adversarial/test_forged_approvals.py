"""Forged, altered, replayed and stale approvals never make a held call run; a valid one
always does. Each case runs on memory, SQLite and a real PostgreSQL."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import Approver, drive, of_type
from underway import events as ev
from underway.clock import ManualClock
from underway.effects import args_hash
from underway.guard.policy import policy_from_dict
from underway.store import connect


class S(BaseModel):
    pass


class Transfer(BaseModel):
    to: str
    amount: float


executions: list[dict[str, Any]] = []
beneficiary = {"to": "ACME-1"}


@uw.tool(irreversible=True, amount="amount", currency="INR")
async def transfer(args: Transfer) -> dict[str, Any]:
    """Move money."""
    executions.append(args.model_dump())
    return {"ok": True}


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "all-transfers", "tools": ["transfer"], "outcome": "require_approval",
     "approver_role": "treasurer", "expires_in": 3600},
]})

flow = uw.Flow("payout", state=S, tools=[transfer], policy=POLICY)


@flow.step
async def pay(ctx: uw.RunContext[S, Any]) -> Any:
    try:
        # The beneficiary is read when the step runs: a test changes it after approval.
        await ctx.call(transfer, {"to": beneficiary["to"], "amount": 50000})
    except uw.ToolCallError as exc:
        return ctx.done({"refused": exc.error_type})
    return ctx.done("paid")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> Iterator[uw.Engine]:
    url = {"memory": lambda: "memory://", "sqlite": lambda: request.getfixturevalue("sqlite_url"),
           "postgres": lambda: request.getfixturevalue("pg_url")}[request.param]()
    store = connect(url)
    executions.clear()
    beneficiary["to"] = "ACME-1"
    yield uw.Engine(store, flows=[flow], clock=ManualClock(1.8e9))
    store.close()


def waiting_run(engine: uw.Engine) -> tuple[str, uw.RunState]:
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    return run_id, s


def refused_with(engine: uw.Engine, run_id: str, reason: str, *, before: int = 0) -> None:
    """The run journaled the refusal, still waits, and nothing new executed."""
    s = drive(engine, run_id)
    invalid = of_type(engine, run_id, ev.ApprovalInvalid)
    assert invalid and invalid[-1].reason == reason, [e.reason for e in invalid]
    assert s.status == "waiting" and len(executions) == before
    assert not of_type(engine, run_id, ev.ApprovalGranted)


def flip(sig: str) -> str:
    raw = bytearray(base64.b64decode(sig))
    raw[7] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def test_a_valid_approval_runs_the_call_exactly_once(engine: uw.Engine, tmp_path: Path) -> None:
    alice = Approver(engine, tmp_path, "alice", ("treasurer",))
    run_id, s = waiting_run(engine)
    engine.submit_decision(alice.decide(s))
    s = drive(engine, run_id)
    assert s.status == "completed" and s.result == "paid"
    assert executions == [{"to": "ACME-1", "amount": 50000.0}]


@pytest.mark.parametrize("case", [
    "byte_flipped_signature", "wrong_key", "other_tenants_key", "key_without_role",
    "different_arguments", "another_run", "another_request", "expired", "tampered_amount_field",
])
def test_a_forged_or_stale_approval_is_journaled_and_the_call_never_runs(
    engine: uw.Engine, tmp_path: Path, case: str,
) -> None:
    alice = Approver(engine, tmp_path, "alice", ("treasurer",))
    run_id, s = waiting_run(engine)
    expected = {
        "byte_flipped_signature": "bad_signature", "wrong_key": "bad_signature",
        "other_tenants_key": "unknown_approver", "key_without_role": "missing_role",
        "different_arguments": "args_mismatch", "another_run": "wrong_run",
        "another_request": "not_pending", "expired": "expired",
        "tampered_amount_field": "bad_signature",
    }[case]
    if case == "byte_flipped_signature":
        d = alice.decide(s)
        d["signature"] = flip(d["signature"])
    elif case == "wrong_key":
        mallory = Approver(engine, tmp_path, "mallory", ("treasurer",), register=False)
        d = mallory.decide(s, approver_id="alice")  # claims to be alice
    elif case == "other_tenants_key":
        d = Approver(engine, tmp_path, "eve", ("treasurer",), tenant="other").decide(s)
    elif case == "key_without_role":
        d = Approver(engine, tmp_path, "intern", ("viewer",)).decide(s)
    elif case == "different_arguments":
        d = alice.decide(s, args_hash=args_hash("transfer", {"to": "EVIL", "amount": 50000}))
    elif case == "another_run":
        d = alice.decide(s, run_id="some-other-run")
    elif case == "another_request":
        d = alice.decide(s, request_id="apr:some-other-call")
    elif case == "expired":
        d = alice.decide(s, expires_at=engine.clock.now() + 10)
        engine.clock.advance(11)  # type: ignore[attr-defined]
    else:
        d = alice.decide(s)
        d["comment"] = "approved by the board"  # altered after signing
    engine.client._send(run_id, "underway.approval", d, "default", None, "attacker")
    refused_with(engine, run_id, expected)
    # The request is still open: a valid approval still works afterwards.
    engine.submit_decision(alice.decide(engine.state(run_id)))
    assert drive(engine, run_id).status == "completed" and len(executions) == 1


def test_a_replayed_nonce_is_refused(engine: uw.Engine, tmp_path: Path) -> None:
    alice = Approver(engine, tmp_path, "alice", ("treasurer",))
    first, s1 = waiting_run(engine)
    d1 = alice.decide(s1)
    engine.submit_decision(d1)
    assert drive(engine, first).status == "completed"
    second, s2 = waiting_run(engine)
    # Correctly signed for the second run, but re-using the first decision's nonce.
    engine.submit_decision(alice.decide(s2, nonce=d1["nonce"]))
    refused_with(engine, second, "replayed_nonce", before=1)
    # And the first decision, submitted again, changes nothing anywhere.
    engine.client._send(first, "underway.approval", d1, "default", None, "attacker")
    drive(engine, first)
    assert len(executions) == 1


def test_two_concurrent_submissions_run_the_call_once(engine: uw.Engine, tmp_path: Path) -> None:
    alice = Approver(engine, tmp_path, "alice", ("treasurer",))
    bob = Approver(engine, tmp_path, "bob", ("treasurer",))
    run_id, s = waiting_run(engine)
    same = alice.decide(s)
    decisions = [same, same, bob.decide(s)]
    accepted: list[bool] = []
    threads = [threading.Thread(target=lambda d=d: accepted.append(engine.submit_decision(d)))
               for d in decisions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(accepted) == [False, True, True], "the identical submission is deduplicated"
    s = drive(engine, run_id)
    assert s.status == "completed" and len(executions) == 1
    assert len(of_type(engine, run_id, ev.ApprovalGranted)) == 1
    assert len(of_type(engine, run_id, ev.ApprovalInvalid)) == 1


def test_arguments_changed_after_approval_are_refused(engine: uw.Engine, tmp_path: Path) -> None:
    alice = Approver(engine, tmp_path, "alice", ("treasurer",))
    run_id, s = waiting_run(engine)
    engine.submit_decision(alice.decide(s))
    beneficiary["to"] = "EVIL-9"  # the step now computes different arguments
    s = drive(engine, run_id)
    assert executions == [] and s.result == {"refused": "ApprovalInvalid"}
    refused = of_type(engine, run_id, ev.ToolRefused)
    assert refused[-1].cause == "approval_invalid" and "differ" in refused[-1].reason


def test_an_approver_revoked_before_the_call_runs_is_refused(
    engine: uw.Engine, tmp_path: Path,
) -> None:
    alice = Approver(engine, tmp_path, "alice", ("treasurer",))
    run_id, s = waiting_run(engine)
    engine.submit_decision(alice.decide(s))
    # The grant is journaled by the worker that reads the decision; revoke in between.
    lease = engine.claim(run_id=run_id)[0]
    original = engine.store.get_approver

    def revoke_after_first_lookup(tenant: str, approver: str) -> Any:
        found = original(tenant, approver)
        engine.store.revoke_approver(tenant, approver, at=engine.clock.now())
        return found

    engine.store.get_approver = revoke_after_first_lookup  # type: ignore[method-assign]
    import asyncio

    s = asyncio.run(engine.activate(lease))
    assert executions == [] and s.result == {"refused": "ApprovalInvalid"}
    assert "revoked" in of_type(engine, run_id, ev.ToolRefused)[-1].reason
