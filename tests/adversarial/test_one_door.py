"""One door: every way a tool call can be executed by every way the guard can refuse it.

Each case first brings a run to the point where its call is about to be executed again by
one path (a first attempt, a retry after an error or a timeout, a resume of a dead run, a
resolution, a re-run after a crash or after ``reconcile`` said "not happened"), then puts
a refusal in force (allow-list, schema, budget, policy deny, approval required) and lets
the run go on. The tool must not run again, and the refusal must be journaled. On SQLite
and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

import underway as uw
from underway import events as ev
from underway.clock import ManualClock
from underway.effects import Reconciled, Tool
from underway.engine import Engine
from underway.guard.budgets import Budget
from underway.guard.policy import policy_from_dict
from underway.journal.state import RunState
from underway.retry import RetryPolicy
from underway.runner import Runner
from underway.store import Store, connect


class Pay(BaseModel):
    account: str
    amount: float
    currency: str = "INR"


class S(BaseModel):
    outcome: Any = None


class Crash(BaseException):
    """Ends the process's work mid-call, like SIGKILL: nothing after the intent commits."""


@dataclasses.dataclass
class World:
    """A run whose one call is about to be executed again by ``path``."""

    engine: Engine
    store: Store
    clock: ManualClock
    flow: uw.Flow[Any, Any]
    tool: Tool
    entries: list[str]
    run_id: str = ""

    def drive(self) -> RunState:
        try:
            asyncio.run(Runner(self.engine).run_until_idle())
        except Crash:
            # The "process" died holding the lease; its lease is freed as a dead one's.
            self.store.expire_lease("default", self.run_id, self.engine.owner)
        return self.engine.state(self.run_id)

    tmp: Path = Path(".")

    def events(self) -> list[ev.Event]:
        return [r.event for r in self.engine.journal.history("default", self.run_id)]


PATHS = ["first", "retry_after_error", "retry_after_timeout", "resume", "resolve_retry",
         "signed_resolve_retry", "reconcile_not_happened", "crash_idempotent",
         "signed_resume"]
REFUSALS = ["not_allowed", "schema", "budget", "deny", "approval"]


def _world(url: str, path: str, tmp: Path) -> World:
    entries: list[str] = []
    first = {
        "retry_after_error": "error", "retry_after_timeout": "timeout", "resume": "fatal",
        "signed_resume": "fatal", "resolve_retry": "timeout",
        "signed_resolve_retry": "timeout", "reconcile_not_happened": "crash",
        "crash_idempotent": "crash",
    }.get(path)

    async def pay(args: Pay, info: uw.CallInfo) -> dict[str, Any]:
        entries.append(info.key)
        if len(entries) == 1 and first == "error":
            raise ConnectionError("gateway busy")
        if len(entries) == 1 and first == "fatal":
            raise RuntimeError("gateway refused the request")
        if len(entries) == 1 and first == "timeout":
            await asyncio.Event().wait()
        if len(entries) == 1 and first == "crash":
            raise Crash
        return {"paid": args.amount}

    async def not_happened(key: str) -> Reconciled:
        return Reconciled.not_happened()

    idempotent = path in ("crash_idempotent", "retry_after_timeout")
    tool = uw.tool(
        pay, name="pay", idempotent=idempotent, irreversible=not idempotent,
        amount="amount", currency="arg:currency", timeout=0.2,
        retry=RetryPolicy(max_attempts=3) if path in ("retry_after_error",
                                                      "retry_after_timeout") else None,
        reconcile=not_happened if path == "reconcile_not_happened" else None,
    )
    flow = uw.Flow(f"one-door-{path}", state=S, tools=[tool])

    @flow.step
    async def go(ctx: Any) -> Any:
        ctx.state.outcome = await ctx.call(tool, {"account": "A-1", "amount": 25000})
        return ctx.done(ctx.state.outcome)

    clock = ManualClock()
    store = connect(url)
    engine = Engine(store, flows=[flow], clock=clock, lease_ttl=60)
    return World(engine, store, clock, flow, tool, entries)


def _bring_to_edge(w: World, path: str, approver: Any) -> None:
    """Run until the call is about to be executed again by ``path`` (the first attempt
    happened, or — for ``first`` — nothing has run yet)."""
    w.run_id, _ = w.engine.start(w.flow)
    if path == "first":
        return
    s = w.drive()
    assert len(w.entries) == 1
    if path in ("retry_after_error", "retry_after_timeout"):
        assert s.status == "waiting" and any(isinstance(e, ev.RetryScheduled)
                                             for e in w.events())
        w.clock.advance(3600)
    elif path in ("resume", "signed_resume"):
        assert s.status == "dead", s
    elif path in ("resolve_retry", "signed_resolve_retry"):
        assert s.status == "escalated" and s.escalation is not None
        assert s.escalation.cause == "unknown_outcome"
    else:  # a crash: the intent is journaled, no outcome
        assert s.status == "ready" and s.calls[0].status == "started"


def _go_on(w: World, path: str, approver: Any) -> None:
    """Make the run go on by ``path`` (an operator's or approver's action where needed)."""
    if path == "resume":
        w.engine.resume(w.run_id, by="intern")
    elif path == "signed_resume":
        s = w.engine.state(w.run_id)
        w.engine.submit_decision(approver.resume(s))
    elif path == "resolve_retry":
        w.engine.resolve(w.run_id, resolution="retry", by="intern")
    elif path == "signed_resolve_retry":
        w.engine.submit_decision(approver.retry(w.engine.state(w.run_id)))


def _refuse(w: World, refusal: str) -> type[ev.Event]:
    """Put ``refusal`` in force; the event that must show it."""
    g = w.engine.guard
    if refusal == "not_allowed":
        w.flow.allowed_tools = frozenset({"something_else"})
        return ev.ToolRefused
    if refusal == "schema":
        class Strict(BaseModel):
            account: str
            amount: float = Field(lt=100)
            currency: str = "INR"
        object.__setattr__(w.tool, "args_model", Strict)
        return ev.SchemaValidationFailed
    if refusal == "budget":
        g.budget = Budget(money={"INR": Decimal(1000)})
        return ev.BudgetExceeded
    rule = {"id": "pay", "tools": ["pay"], "outcome": "deny" if refusal == "deny"
            else "require_approval", "reason": "payments are frozen"}
    if refusal == "approval":
        rule["approver_role"] = "finance"
    g.policy = policy_from_dict({"version": "attack", "rules": [rule]})
    return ev.ToolRefused if refusal == "deny" else ev.ApprovalRequested


class Approver:
    """A registered approver of the tenant, holding its private key."""

    def __init__(self, w: World) -> None:
        from underway.guard.approvals import ApproverRecord, generate_keypair
        from underway.guard.approvals.keys import load_private_key, write_private_key

        pem, public = generate_keypair()
        path = w.tmp / "ops-lead.pem"
        write_private_key(path, pem)
        self.key, self.id, self.clock = load_private_key(path), "ops-lead", w.clock
        w.store.put_approver(ApproverRecord(
            tenant_id="default", approver_id=self.id, public_key=public,
            roles=("finance", "ops"), created_at=w.clock.now(),
        ))

    def retry(self, s: RunState) -> dict[str, Any]:
        """A signed ``retry`` resolution of the escalated call of ``s``."""
        from underway.guard.approvals import sign_decision

        esc = s.escalation
        assert esc is not None
        return sign_decision(
            self.key, request_id=str(esc.request_id), run_id=s.run_id,
            tenant_id=s.tenant_id, tool=str(esc.tool), args_hash=s.calls[0].args_hash,
            decision="resolve", expires_at=self.clock.now() + 3600, approver_id=self.id,
            answer={"resolution": "retry", "result": None},
        ).model_dump(mode="json")

    def resume(self, s: RunState) -> dict[str, Any]:
        """A signed resume of the dead run ``s``."""
        from underway.guard.approvals import sign_decision

        return sign_decision(
            self.key, request_id=str(s.dead_request), run_id=s.run_id, tenant_id=s.tenant_id,
            tool="", args_hash="", decision="resolve", expires_at=self.clock.now() + 3600,
            approver_id=self.id, answer={"resolution": "resume", "step": None},
        ).model_dump(mode="json")


@pytest.mark.parametrize("refusal", REFUSALS)
@pytest.mark.parametrize("path", PATHS)
def test_no_path_executes_a_call_without_the_whole_guard(
    db_url: str, tmp_path: Path, path: str, refusal: str
) -> None:
    w = _world(db_url, path, tmp_path)
    w.tmp = tmp_path
    approver = Approver(w)
    _bring_to_edge(w, path, approver)
    before = len(w.entries)
    seen = len(w.events())
    shows = _refuse(w, refusal)
    _go_on(w, path, approver)
    s = w.drive()
    after = w.events()[seen:]
    assert len(w.entries) == before, f"{path}: the refused call ran ({refusal})"
    assert any(isinstance(e, shows) for e in after), (path, refusal, after)
    assert s.status != "completed"
    if path in ("resolve_retry", "signed_resolve_retry"):
        resolved = [e for e in after if isinstance(e, ev.EscalationResolved)]
        assert resolved and resolved[0].by == ("ops-lead" if path.startswith("signed")
                                               else "intern")
        assert (resolved[0].decision is not None) == path.startswith("signed")
    if path in ("resume", "signed_resume"):
        resumed = [e for e in after if isinstance(e, ev.RunResumed)]
        assert resumed and resumed[0].by == ("ops-lead" if path == "signed_resume"
                                             else "intern")
    w.store.close()
