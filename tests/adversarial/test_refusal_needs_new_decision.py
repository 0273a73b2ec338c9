"""A call refused by policy or rejected by an approver runs only after a new decision that
the current policy accepts; operator actions that make a run go on are journaled with who
did them, and need a signature when the worker requires signed resolutions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.clock import ManualClock
from underway.engine import Engine
from underway.errors import SignedResolutionRequired
from underway.events import canonical_json
from underway.guard.approvals import ApproverRecord, generate_keypair, sign_decision
from underway.guard.approvals.keys import load_private_key, write_private_key
from underway.guard.policy import policy_from_dict
from underway.journal.state import RunState
from underway.runner import Runner
from underway.store import connect


class Refund(BaseModel):
    invoice: str
    amount: float
    currency: str = "INR"


class S(BaseModel):
    receipt: Any = None


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "large", "tools": ["refund"], "outcome": "require_approval",
     "approver_role": "finance", "amount": {"op": ">", "value": "10000", "currency": "INR"}},
]})


class World:
    def __init__(self, url: str, tmp: Path, *, signed: bool = False) -> None:
        self.executed: list[str] = []

        @uw.tool(irreversible=True, amount="amount", currency="arg:currency")
        async def refund(args: Refund, info: uw.CallInfo) -> dict[str, Any]:
            self.executed.append(info.key)
            return {"refund": args.invoice}

        flow = uw.Flow("refunds", state=S, tools=[refund])

        @flow.step
        async def pay(ctx: Any) -> Any:
            # No handling of a refusal: the run stops dead for an operator.
            ctx.state.receipt = await ctx.call(refund, {"invoice": "INV-9", "amount": 25000})
            return ctx.done(ctx.state.receipt)

        self.clock = ManualClock()
        self.engine = Engine(connect(url), flows=[flow], clock=self.clock, policy=POLICY,
                             signed_resolutions=signed)
        pem, public = generate_keypair()
        write_private_key(tmp / "fin.pem", pem)
        self.key = load_private_key(tmp / "fin.pem")
        self.engine.store.put_approver(ApproverRecord(
            tenant_id="default", approver_id="fin", public_key=public, roles=("finance",),
            created_at=self.clock.now()))
        self.run_id, _ = self.engine.start(flow)

    def drive(self) -> RunState:
        asyncio.run(Runner(self.engine).run_until_idle())
        return self.engine.state(self.run_id)

    def decide(self, s: RunState, decision: str, **kw: Any) -> dict[str, Any]:
        req = s.pending_approval
        assert req is not None
        return sign_decision(
            self.key, request_id=str(req.request_id), run_id=s.run_id,
            tenant_id=s.tenant_id, tool=str(req.tool), args_hash=str(req.args_hash),
            decision=decision, expires_at=float(req.expires_at), approver_id="fin",  # type: ignore[arg-type]
            **kw,
        ).model_dump(mode="json")

    def resume_signed(self, s: RunState) -> dict[str, Any]:
        return sign_decision(
            self.key, request_id=str(s.dead_request), run_id=s.run_id, tenant_id=s.tenant_id,
            tool="", args_hash="", decision="resolve", expires_at=self.clock.now() + 60,
            approver_id="fin", answer={"resolution": "resume", "step": None},
        ).model_dump(mode="json")

    def events(self) -> list[ev.Event]:
        return [r.event for r in self.engine.journal.history("default", self.run_id)]


def _dead_after(w: World, how: str) -> tuple[RunState, dict[str, Any]]:
    """Bring the run dead by a rejection or an expired approval; also return a signed
    approval of the first request that never arrived in time (an attacker's spare)."""
    s = w.drive()
    assert s.status == "waiting" and s.pending_approval is not None
    spare = w.decide(s, "approve")
    if how == "rejected":
        w.engine.submit_decision(w.decide(s, "reject", comment="no"))
    else:
        w.clock.advance(10 * 86400)
    s = w.drive()
    assert s.status == "dead", s
    return s, spare


def _deliver_unchecked(w: World, decision: dict[str, Any], signal_id: str = "insider") -> None:
    """Put a decision in the run's inbox as an insider could, past the API's checks."""
    from underway.journal.state import ANSWER_SIGNAL, APPROVAL_SIGNAL
    from underway.store.base import SignalRecord

    w.engine.store.send_signal(SignalRecord(
        "default", w.run_id, signal_id, ANSWER_SIGNAL if decision["decision"] == "resolve"
        else APPROVAL_SIGNAL, canonical_json(decision), "fin",
        w.clock.now()))


@pytest.mark.parametrize("how", ["rejected", "expired"])
def test_unsigned_resume_after_a_refusal_asks_anew_and_old_decisions_do_not_count(
    db_url: str, tmp_path: Path, how: str
) -> None:
    w = World(db_url, tmp_path)
    s, spare = _dead_after(w, how)
    first = next(e for e in w.events() if isinstance(e, ev.ApprovalRequested))
    w.engine.resume(w.run_id, by="intern")
    s = w.drive()
    assert w.executed == []
    assert s.status == "waiting" and s.pending_approval is not None
    second = s.pending_approval.request_id
    assert second != first.request_id
    assert [e.by for e in w.events() if isinstance(e, ev.RunResumed)] == ["intern"]
    # A decision on the first request — however well signed — settles nothing now.
    if how == "expired":
        with pytest.raises(uw.ConfigurationError, match="expired"):
            w.engine.submit_decision(spare)  # refused at the door of the API already
        _deliver_unchecked(w, spare)
    else:
        w.engine.submit_decision(spare)
    s = w.drive()
    assert w.executed == [] and s.status == "waiting"
    assert any(isinstance(e, ev.ApprovalInvalid) and e.reason in ("not_pending", "expired")
               for e in w.events())
    # Only a new approval of the new request lets the call run, once.
    w.engine.submit_decision(w.decide(s, "approve"))
    s = w.drive()
    assert s.status == "completed" and len(w.executed) == 1


def test_policy_deny_then_resume_runs_only_once_the_current_policy_accepts(
    db_url: str, tmp_path: Path
) -> None:
    w = World(db_url, tmp_path)
    w.engine.guard.policy = policy_from_dict({"version": "deny", "rules": [
        {"id": "frozen", "tools": ["refund"], "outcome": "deny", "reason": "frozen"}]})
    assert w.drive().status == "dead"
    w.engine.resume(w.run_id, by="intern")
    assert w.drive().status == "dead" and w.executed == []
    refused = [e for e in w.events() if isinstance(e, ev.ToolRefused)]
    assert len(refused) == 2 and {e.cause for e in refused} == {"policy_denied"}
    w.engine.guard.policy = POLICY  # the operator changes the policy: approval required
    w.engine.resume(w.run_id, by="ops")
    s = w.drive()
    assert s.status == "waiting" and w.executed == []


@pytest.mark.parametrize("how", ["rejected", "expired"])
def test_signed_resolutions_refuse_an_unsigned_resume(
    db_url: str, tmp_path: Path, how: str
) -> None:
    w = World(db_url, tmp_path, signed=True)
    s, _ = _dead_after(w, how)
    with pytest.raises(SignedResolutionRequired, match="unsigned resume is refused"):
        w.engine.resume(w.run_id, by="intern")
    # Sent past the refusal (a client that does not know the setting): the worker refuses.
    uw.Client(w.engine.store, clock=w.clock).resume(w.run_id, by="intern")
    s = w.drive()
    assert s.status == "dead" and w.executed == []
    ignored = [e for e in w.events() if isinstance(e, ev.SignalIgnored)]
    assert ignored and "unsigned resume refused" in ignored[-1].reason
    # A forged resume (another run's request id) is refused and journaled.
    forged = w.resume_signed(s)
    forged_bad = dict(forged, request_id="dead-1")
    with pytest.raises(uw.ConfigurationError, match="bad_signature"):
        w.engine.submit_decision(forged_bad)
    _deliver_unchecked(w, forged_bad)
    assert w.drive().status == "dead"
    assert any(isinstance(e, ev.ApprovalInvalid) for e in w.events())
    # A signed resume goes on — and the call still needs a new approval.
    w.engine.submit_decision(forged)
    s = w.drive()
    assert [e.by for e in w.events() if isinstance(e, ev.RunResumed)] == ["fin"]
    assert s.status == "waiting" and w.executed == []
    # The same signed resume cannot be used twice.
    w.clock.advance(10 * 86400)
    assert w.drive().status == "dead"
    _deliver_unchecked(w, forged, signal_id="replayed")
    assert w.drive().status == "dead" and w.executed == []
    assert [e.by for e in w.events() if isinstance(e, ev.RunResumed)] == ["fin"]


def test_signed_resolutions_refuse_an_unsigned_retry_resolution(
    db_url: str, tmp_path: Path
) -> None:
    entries: list[str] = []

    @uw.tool(irreversible=True, timeout=0.2)
    async def wire(args: dict[str, Any]) -> dict[str, Any]:
        entries.append("x")
        await asyncio.Event().wait()
        return {}

    flow = uw.Flow("wires", state=S, tools=[wire])

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.done(await ctx.call(wire, {"to": "A"}))

    engine = Engine(connect(db_url), flows=[flow], clock=ManualClock(),
                    signed_resolutions=True)
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "escalated"
    with pytest.raises(SignedResolutionRequired, match="unsigned resolution is refused"):
        engine.resolve(run_id, resolution="retry", by="intern")
    uw.Client(engine.store, clock=engine.clock).resolve(run_id, resolution="retry", by="intern")
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "escalated" and entries == ["x"]
