"""Every call passes the guard: allow-list, schema, policy, approval, budgets, shadow mode."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import Approver, drive, history, of_type
from underway import events as ev
from underway.guard.budgets import Budget
from underway.guard.policy import policy_from_dict
from underway.money import Money
from underway.secrets import EnvSecrets
from underway.testing import ScriptedModel, memory_engine


class S(BaseModel):
    outcome: Any = None


class Refund(BaseModel):
    invoice: str
    amount: float
    currency: str = "INR"


class Receipt(BaseModel):
    refund_id: str


executed: list[dict[str, Any]] = []


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def issue_refund(args: Refund, info: uw.CallInfo) -> Receipt:
    """Refund part of an invoice to the customer."""
    executed.append({"args": args.model_dump(), "key": info.key})
    return Receipt(refund_id=f"rf-{args.invoice}")


@uw.tool(read_only=True)
async def lookup(args: dict[str, Any]) -> dict[str, Any]:
    """Read an invoice."""
    return {"invoice": args["invoice"], "due": 100}


POLICY = policy_from_dict({
    "version": "2026-11-29",
    "rules": [
        {"id": "refund-large", "tools": ["issue_refund"], "outcome": "require_approval",
         "approver_role": "finance", "amount": {"op": ">", "value": "10000", "currency": "INR"}},
        {"id": "refund-small", "tools": ["issue_refund"], "outcome": "allow",
         "amount": {"op": "<=", "value": "10000", "currency": "INR"}},
        {"id": "refund-usd", "tools": ["issue_refund"], "outcome": "deny",
         "reason": "refunds in USD are not allowed", "amount": {"op": ">", "value": "0",
                                                                  "currency": "USD"}},
    ],
})


def refund_flow(name: str = "refunds", **options: Any) -> uw.Flow[S, Any]:
    flow = uw.Flow(name, state=S, tools=[issue_refund, lookup], **options)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            out = await ctx.call(issue_refund, dict(ctx.input.model_dump()),
                                 evidence={"ticket": "T-1"}, risks=["money leaves the company"])
        except uw.ToolCallError as exc:
            return ctx.done({"refused": exc.error_type, "message": exc.message})
        return ctx.done(out)

    return flow


class RefundInput(BaseModel):
    invoice: str = "INV-1"
    amount: float = 500.0
    currency: str = "INR"


def make(flow: uw.Flow[S, Any] | None = None, **engine_options: Any) -> tuple[uw.Engine, Any]:
    executed.clear()
    flow = flow or refund_flow()
    flow.input_type = RefundInput
    engine, clock = memory_engine([flow])
    for name, value in engine_options.items():
        setattr(engine.guard, name, value)
    if "policy" not in engine_options:
        engine.guard.policy = POLICY
    return engine, clock


def test_a_tool_declares_its_nature_and_exports_json_schema() -> None:
    spec = issue_refund.spec()
    assert spec["name"] == "issue_refund"
    assert spec["description"] == "Refund part of an invoice to the customer."
    assert spec["parameters"]["required"] == ["invoice", "amount"]
    assert issue_refund.result_schema()["properties"]["refund_id"]["type"] == "string"
    assert issue_refund.irreversible and issue_refund.mutating and not issue_refund.idempotent
    assert lookup.read_only
    assert issue_refund.money({"invoice": "I", "amount": 12.5, "currency": "inr"}) == Money(
        "INR", Decimal("12.5")
    )
    with pytest.raises(uw.ConfigurationError, match="irreversible and idempotent"):
        uw.tool(lambda a: a, name="x", irreversible=True, idempotent=True)
    with pytest.raises(uw.ConfigurationError, match="without a currency"):
        uw.tool(lambda a: a, name="y", amount="amount")


def test_bad_arguments_are_journaled_returned_to_the_step_and_never_reach_the_tool() -> None:
    engine, _ = make(policy=None)
    flow = uw.Flow("bad_args", state=S, tools=[issue_refund])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            await ctx.call(issue_refund, {"invoice": "INV-1", "amount": "lots"})
        except uw.ToolCallError as exc:
            return ctx.done({"error": exc.error_type})
        return ctx.done("ran")

    engine.register(flow)
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert s.status == "completed" and s.result == {"error": "SchemaValidationFailed"}
    failed = of_type(engine, run_id, ev.SchemaValidationFailed)
    assert failed[0].where == "args" and failed[0].errors[0]["loc"] == ["amount"]
    assert not of_type(engine, run_id, ev.ToolStarted), "no intent for invalid arguments"
    assert executed == []


def test_a_tool_off_the_allow_list_is_refused_and_journaled() -> None:
    engine, _ = make(policy=None)
    other = uw.tool(lambda a: {"ok": True}, name="delete_everything")
    engine.tools[other.name] = other
    flow = uw.Flow("narrow", state=S, tools=["lookup"])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            await ctx.call("delete_everything", {})
        except uw.ToolCallError as exc:
            return ctx.done(exc.error_type)
        return ctx.done("ran")

    engine.register(flow)
    run_id, _ = engine.start(flow)
    assert drive(engine, run_id).result == "ToolNotAllowed"
    refused = of_type(engine, run_id, ev.ToolRefused)
    assert refused[0].cause == "not_allowed" and "allow-list" in refused[0].reason


def test_policy_allows_small_refunds_and_journals_the_decision() -> None:
    engine, _ = make()
    run_id, _ = engine.start("refunds", {"amount": 500})
    s = drive(engine, run_id)
    assert s.result == {"refund_id": "rf-INV-1"} and len(executed) == 1
    decided = of_type(engine, run_id, ev.PolicyDecided)[0]
    assert (decided.decision, decided.rule_id, decided.policy_version) == (
        "allow", "refund-small", "2026-11-29")
    started = of_type(engine, run_id, ev.ToolStarted)[0]
    assert started.policy_decision == "allow"
    assert of_type(engine, run_id, ev.ToolSucceeded)[0].counts == {"money.INR": 500.0}
    assert s.money == {"INR": 500.0}


def test_policy_denial_is_refused_journaled_and_returned_to_the_step() -> None:
    engine, _ = make()
    run_id, _ = engine.start("refunds", {"amount": 5, "currency": "USD"})
    s = drive(engine, run_id)
    assert s.result["refused"] == "PolicyDenied" and "USD" in s.result["message"]
    assert executed == []
    assert of_type(engine, run_id, ev.ToolRefused)[0].cause == "policy_denied"


def test_a_large_refund_waits_for_a_signed_approval_and_then_runs_once(tmp_path: Path) -> None:
    engine, clock = make()
    alice = Approver(engine, tmp_path, "alice", ("finance",))
    run_id, _ = engine.start("refunds", {"amount": 25000})
    s = drive(engine, run_id)
    assert s.status == "waiting" and executed == []
    req = s.pending_approval
    assert req is not None and req.tool == "issue_refund" and req.required_role == "finance"
    assert req.evidence == {"ticket": "T-1"} and req.risks == ["money leaves the company"]
    assert engine.store.get_run("default", run_id).next_wake_at == req.expires_at
    clock.advance(60)
    assert engine.submit_decision(alice.decide(s))
    s = drive(engine, run_id)
    assert s.status == "completed", s
    assert s.result == {"refund_id": "rf-INV-1"} and len(executed) == 1
    granted = of_type(engine, run_id, ev.ApprovalGranted)[0]
    assert granted.approver_id == "alice" and granted.decision["signature"]
    assert of_type(engine, run_id, ev.ToolStarted)[0].policy_decision == "approved"


def test_a_rejection_comes_back_to_the_step(tmp_path: Path) -> None:
    engine, _ = make()
    bob = Approver(engine, tmp_path, "bob", ("finance",))
    run_id, _ = engine.start("refunds", {"amount": 25000})
    s = drive(engine, run_id)
    engine.submit_decision(bob.decide(s, "reject", comment="customer already refunded"))
    s = drive(engine, run_id)
    assert s.result["refused"] == "ApprovalRejected"
    assert "customer already refunded" in s.result["message"] and executed == []


def test_an_unanswered_request_expires_and_the_step_hears_it(tmp_path: Path) -> None:
    engine, clock = make()
    run_id, _ = engine.start("refunds", {"amount": 25000})
    s = drive(engine, run_id)
    clock.advance(24 * 3600 + 1)
    s = drive(engine, run_id)
    assert s.result["refused"] == "ApprovalExpired" and executed == []
    assert of_type(engine, run_id, ev.ApprovalExpired)


def test_shadow_mode_journals_intended_calls_without_running_them() -> None:
    engine, _ = make(shadow=True)
    run_id, _ = engine.start("refunds", {"amount": 25000})
    s = drive(engine, run_id)
    assert s.status == "completed" and s.result == {"shadowed": True, "tool": "issue_refund"}
    shadowed = of_type(engine, run_id, ev.ToolShadowed)[0]
    assert shadowed.decision == "require_approval" and shadowed.args["amount"] == 25000
    assert executed == [] and not of_type(engine, run_id, ev.ApprovalRequested)


def test_a_run_budget_stops_the_call_that_would_cross_it() -> None:
    flow = refund_flow("budgeted", budget=Budget(money={"INR": 1000}))
    engine, _ = make(flow)
    run_id, _ = engine.start("budgeted", {"amount": 1500})
    s = drive(engine, run_id)
    assert s.status == "escalated" and executed == []
    over = of_type(engine, run_id, ev.BudgetExceeded)[0]
    assert (over.metric, over.scope, over.action, over.limit) == ("money.INR", "run", "escalate",
                                                                   1000.0)


def test_a_budget_may_fail_the_run_instead() -> None:
    flow = uw.Flow("chatty", state=S, budget=Budget(model_calls=2, on_exceed="fail"))
    model = ScriptedModel([{"n": i} for i in range(5)])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        for i in range(5):
            await ctx.model(model, {"i": i})
        return ctx.done("too far")

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert s.status == "failed" and s.model_calls == 2 and len(model.requests) == 2
    assert "model_calls" in (s.error or "")


def test_secrets_reach_the_tool_but_never_the_journal() -> None:
    seen: list[str] = []

    @uw.tool(read_only=True, secrets=("ERP_TOKEN",))
    async def erp(args: Any, info: uw.CallInfo) -> Any:
        seen.append(info.secrets["ERP_TOKEN"])
        raise RuntimeError(f"ERP refused token {info.secrets['ERP_TOKEN']}")

    flow = uw.Flow("secretive", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            await ctx.call(erp, {})
        except uw.ToolCallError as exc:
            return ctx.done(exc.message)
        return ctx.done("ok")

    engine, _ = memory_engine([flow], [erp])
    engine.guard.secrets = EnvSecrets(environ={"ERP_TOKEN": "s3cr3t-value"})
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert seen == ["s3cr3t-value"]
    assert s.result == "ERP refused token [secret]"
    raw = b"".join(e.payload for e in engine.store.load_events("default", run_id))
    assert b"s3cr3t" not in raw
    assert "s3cr3t" not in repr(uw.CallInfo("k", "t", "r", "s", 0, secrets={"A": "s3cr3t"}))


def test_a_question_escalates_and_a_signed_answer_resumes_the_step(tmp_path: Path) -> None:
    flow = uw.Flow("curious", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        answer = await ctx.ask("Which address should the letter go to?",
                               context={"candidates": 2}, role="support")
        return ctx.done({"answer": answer})

    engine, _ = memory_engine([flow])
    told: list[Any] = []

    class Recorder:
        async def notify(self, notice: Any) -> None:
            told.append(notice)

    engine.guard.notifier = Recorder()
    carol = Approver(engine, tmp_path, "carol", ("support",))
    mallory = Approver(engine, tmp_path, "mallory", ("intern",))
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert s.status == "escalated" and s.escalation.question.startswith("Which address")
    esc = s.escalation
    assert [(n.kind, n.required_role, n.evidence) for n in told] == [
        ("question", "support", {"candidates": 2})]

    def answer(who: Approver, text: str) -> dict[str, Any]:
        from underway.guard.approvals import sign_decision

        return sign_decision(
            who.key, request_id=esc.request_id, run_id=run_id, tenant_id="default",
            tool="", args_hash="", decision="answer", expires_at=engine.clock.now() + 3600,
            approver_id=who.id, answer=text,
        ).model_dump(mode="json")

    engine.submit_decision(answer(mallory, "the old one"))
    s = drive(engine, run_id)
    assert s.status == "escalated"
    assert of_type(engine, run_id, ev.ApprovalInvalid)[0].reason == "missing_role"
    engine.submit_decision(answer(carol, "the billing address"))
    s = drive(engine, run_id)
    assert s.status == "completed" and s.result == {"answer": "the billing address"}
    assert of_type(engine, run_id, ev.EscalationAnswered)[0].approver_id == "carol"


def test_the_run_principal_and_roles_are_journaled_and_reach_tools() -> None:
    got: list[Any] = []

    @uw.tool(read_only=True)
    async def whoami(args: Any, info: uw.CallInfo) -> Any:
        got.append((info.principal, info.roles))
        return None

    flow = uw.Flow("identity", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        await ctx.call(whoami, {})
        return ctx.done()

    engine, _ = memory_engine([flow], [whoami])
    run_id, _ = engine.start(flow, principal="agent:collections", roles=["support", "agent"])
    drive(engine, run_id)
    assert got == [("agent:collections", ("agent", "support"))]
    started = history(engine, run_id)[0]
    assert isinstance(started, ev.RunStarted) and started.principal == "agent:collections"


def test_approvers_are_notified_once_the_request_is_durable(tmp_path: Path) -> None:
    from underway.guard.approvals.notify import ApprovalNotice

    seen: list[tuple[ApprovalNotice, int]] = []
    engine, _ = make()

    class Recorder:
        async def notify(self, notice: ApprovalNotice) -> None:
            stored = len(of_type(engine, notice.run_id, ev.ApprovalRequested))
            seen.append((notice, stored))

    engine.guard.notifier = Recorder()
    run_id, _ = engine.start("refunds", {"amount": 25000})
    drive(engine, run_id)
    assert len(seen) == 1
    notice, stored = seen[0]
    assert stored == 1, "the request was committed before anyone was told"
    assert (notice.tool, notice.required_role, notice.args["amount"]) == (
        "issue_refund", "finance", 25000)
    assert notice.evidence == {"ticket": "T-1"} and notice.risks == ("money leaves the company",)
