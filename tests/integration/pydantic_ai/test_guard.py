"""A pydantic-ai agent's calls pass the one door: allow-list, schema, policy, budgets from
``UsageLimits``, signed approvals for ``requires_approval`` tools, a person's answer for a
deferred tool, and taint."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic_ai import Agent
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext as PaiContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset, FunctionToolset
from pydantic_ai.usage import UsageLimits

import underway as uw
from underway import events as ev
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.guard.policy import Policy, Rule
from underway.integrations.pydantic_ai import DurableAgent


def drive(engine: uw.Engine) -> None:
    asyncio.run(uw.Runner(engine).run_until_idle())


def journal(engine: uw.Engine, run_id: str, kind: type[Any]) -> list[Any]:
    return [e.event for e in engine.client.events(run_id) if isinstance(e.event, kind)]


def answers(messages: list[ModelMessage]) -> list[Any]:
    """What came back from tools so far: returns and retry prompts, in order."""
    return [p for m in messages for p in m.parts
            if isinstance(p, ToolReturnPart | RetryPromptPart)]


class Script:
    """A FunctionModel that makes the scripted calls one per turn, then says what it saw."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = list(calls)
        self.asked = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.asked += 1
        turn = len(answers(messages))
        if turn < len(self.calls):
            name, args = self.calls[turn]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{turn}")])
        seen = answers(messages)
        return ModelResponse(parts=[TextPart(" | ".join(
            str(p.content) if isinstance(p, ToolReturnPart) and p.outcome == "success"
            else f"{getattr(p, 'outcome', 'retried')}: {p.content}" for p in seen))])


def shop(script: Script, effects: list[str], **approval: Any) -> Agent[None, str]:
    agent = Agent(FunctionModel(script))

    @agent.tool_plain
    def order_status(order: str) -> str:
        effects.append(f"status {order}")
        return "shipped"

    @agent.tool_plain(**approval)
    def refund(order: str, amount: int) -> str:
        effects.append(f"refund {order} {amount}")
        return f"refunded {amount}"

    return agent


def test_a_tool_off_the_allow_list_is_refused_journaled_and_reported_to_the_model(
    store_url: str,
) -> None:
    effects: list[str] = []
    script = Script(("refund", {"order": "A1", "amount": 5}))
    durable = DurableAgent(shop(script, effects), name="shop", allow=["order_status"])
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert effects == []
    [refused] = journal(engine, run_id, ev.ToolRefused)
    assert (refused.tool, refused.cause) == ("refund", "not_allowed")
    assert "ToolNotAllowed" in str(state.result)


def test_a_policy_denial_reaches_the_model_as_a_failed_tool() -> None:
    effects: list[str] = []
    script = Script(("refund", {"order": "A1", "amount": 5}), ("order_status", {"order": "A1"}))
    policy = Policy("shop-1", [Rule("no-refunds", tools=["refund"], outcome="deny",
                                    reason="refunds go through finance")])
    durable = DurableAgent(shop(script, effects), name="shop", policy=policy,
                           tools={"order_status": {"mutating": False, "trusted_output": True}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert effects == ["status A1"]
    [refused] = journal(engine, run_id, ev.ToolRefused)
    assert refused.cause == "policy_denied"
    assert str(state.result).startswith("failed: PolicyDenied")
    assert str(state.result).endswith("| shipped")


def test_arguments_that_break_the_tool_schema_are_journaled_and_sent_back_for_a_retry(
    store_url: str,
) -> None:
    effects: list[str] = []
    script = Script(("order_status", {"order": 5}), ("order_status", {"order": "A1"}))
    durable = DurableAgent(shop(script, effects), name="shop",
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "status of A1"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert effects == ["status A1"]
    [failed] = journal(engine, run_id, ev.SchemaValidationFailed)
    assert (failed.tool, failed.where) == ("order_status", "args")
    assert str(state.result).startswith("retried: ")
    assert str(state.result).endswith("| shipped")


def test_a_request_limit_becomes_a_budget_that_refuses_the_next_request(
    store_url: str,
) -> None:
    effects: list[str] = []
    script = Script(*[("order_status", {"order": f"A{i}"}) for i in range(10)])
    durable = DurableAgent(shop(script, effects), name="shop",
                           usage_limits=UsageLimits(request_limit=3, tool_calls_limit=None),
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "check them all"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "escalated"
    assert script.asked == 3
    assert len(journal(engine, run_id, ev.ModelResponded)) == 3
    [over] = journal(engine, run_id, ev.BudgetExceeded)
    assert (over.metric, over.limit) == ("model_calls", 3)


def test_a_tool_call_limit_fails_the_run_when_asked_to() -> None:
    effects: list[str] = []
    script = Script(*[("order_status", {"order": f"A{i}"}) for i in range(10)])
    durable = DurableAgent(shop(script, effects), name="shop", on_exceed="fail",
                           usage_limits=UsageLimits(tool_calls_limit=2),
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "check them all"})
    drive(engine)

    assert engine.state(run_id).status == "failed"
    assert effects == ["status A0", "status A1"]


def approver(engine: uw.Engine) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.generate()
    register_approver(engine.store, "priya", public_key=public_key_of(key), roles=["finance"],
                      now=time.time())
    return key


def test_a_requires_approval_tool_waits_for_a_signed_decision_then_runs_once(
    store_url: str,
) -> None:
    effects: list[str] = []
    script = Script(("refund", {"order": "A1", "amount": 500}))
    durable = DurableAgent(shop(script, effects, requires_approval=True), name="shop",
                           approver_role="finance")
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow])
    key = approver(engine)
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "waiting", state.status
    asked = state.pending_approval
    assert asked is not None and asked.tool == "refund"
    assert asked.args == {"order": "A1", "amount": 500}
    assert effects == []
    engine.submit_decision(sign_decision(
        key, request_id=asked.request_id, run_id=run_id, tenant_id="default",
        tool=asked.tool, args_hash=asked.args_hash, decision="approve",
        expires_at=asked.expires_at, approver_id="priya").model_dump(mode="json"))
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.result == "refunded 500"
    assert effects == ["refund A1 500"]
    # The agent ran again after the decision; its first request was read from the journal.
    assert script.asked == 2
    assert len(journal(engine, run_id, ev.ModelResponded)) == 2


def test_a_rejected_approval_is_a_failed_tool_the_model_adapts_to() -> None:
    effects: list[str] = []
    script = Script(("refund", {"order": "A1", "amount": 500}))
    durable = DurableAgent(shop(script, effects, requires_approval=True), name="shop")
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    key = approver(engine)
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)
    asked = engine.state(run_id).pending_approval
    assert asked is not None
    engine.submit_decision(sign_decision(
        key, request_id=asked.request_id, run_id=run_id, tenant_id="default",
        tool=asked.tool, args_hash=asked.args_hash, decision="reject",
        expires_at=asked.expires_at, approver_id="priya").model_dump(mode="json"))
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert effects == []
    assert str(state.result).startswith("failed: ApprovalRejected")


def test_a_mutating_call_after_untrusted_output_is_held_by_the_default_policy() -> None:
    effects: list[str] = []
    script = Script(("order_status", {"order": "A1"}), ("refund", {"order": "A1", "amount": 5}))
    durable = DurableAgent(shop(script, effects), name="shop",
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "waiting"
    asked = state.pending_approval
    assert asked is not None and asked.tool == "refund"
    [held] = journal(engine, run_id, ev.ApprovalRequested)
    # The order comes from the prompt; the amount from nowhere trusted, and no trusted
    # source asked for a refund (no writes=): both hold it.
    assert held.rule_id == "untrusted-argument"
    assert held.evidence["agent"] == "shop"
    assert held.evidence["tainted_by"] == ["order_status"]
    assert held.evidence["held_by"] == [{"arg": "amount", "trusted": False,
                                         "sources": ["order_status"], "repeats": False}]
    assert held.evidence["requested"] is False
    assert effects == ["status A1"]


def test_a_deferred_tool_asks_a_person_whose_signed_answer_is_its_result() -> None:
    script = Script(("ship_date", {"order": "A1"}))
    outside = ExternalToolset([ToolDefinition(
        name="ship_date", description="When an order ships, from the warehouse team.",
        parameters_json_schema={"type": "object", "properties": {"order": {"type": "string"}}},
    )])
    agent = Agent(FunctionModel(script), toolsets=[outside])

    durable = DurableAgent(agent, name="deferred")
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    key = approver(engine)
    run_id, _ = engine.start(durable.flow, {"prompt": "when does A1 ship?"})
    drive(engine)

    esc = engine.state(run_id).escalation
    assert esc is not None and esc.request_id
    engine.submit_decision(sign_decision(
        key, request_id=esc.request_id, run_id=run_id, tenant_id="default", tool="",
        args_hash="", decision="answer", expires_at=float(esc.expires_at or time.time() + 60),
        approver_id="priya", answer="Monday").model_dump(mode="json"))
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.result == "Monday"


def approve(engine: uw.Engine, run_id: str, key: Ed25519PrivateKey) -> None:
    asked = engine.state(run_id).pending_approval
    assert asked is not None
    engine.submit_decision(sign_decision(
        key, request_id=asked.request_id, run_id=run_id, tenant_id="default",
        tool=asked.tool, args_hash=asked.args_hash, decision="approve",
        expires_at=asked.expires_at, approver_id="priya").model_dump(mode="json"))


def test_a_tool_that_raises_approval_required_waits_for_a_signed_approval() -> None:
    effects: list[str] = []
    script = Script(("refund", {"order": "A1", "amount": 900}))
    agent = Agent(FunctionModel(script))

    @agent.tool
    def refund(ctx: PaiContext[None], order: str, amount: int) -> str:
        if amount > 500 and not ctx.tool_call_approved:
            raise ApprovalRequired
        effects.append(f"refund {order} {amount}")
        return f"refunded {amount}"

    durable = DurableAgent(agent, name="dynamic")
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    key = approver(engine)
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)
    assert engine.state(run_id).status == "waiting"
    assert effects == []
    approve(engine, run_id, key)
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.result == "refunded 900"
    assert effects == ["refund A1 900"]
    assert [e.error_type for e in journal(engine, run_id, ev.ToolFailed)] == ["ApprovalRequired"]


def test_an_approval_required_toolset_holds_its_calls_for_a_signed_approval() -> None:
    effects: list[str] = []
    script = Script(("order_status", {"order": "A1"}), ("refund", {"order": "A1", "amount": 5}))
    tools = FunctionToolset[None]()

    @tools.tool_plain
    def order_status(order: str) -> str:
        effects.append(f"status {order}")
        return "shipped"

    @tools.tool_plain
    def refund(order: str, amount: int) -> str:
        effects.append(f"refund {order} {amount}")
        return f"refunded {amount}"

    held = tools.approval_required(lambda ctx, tool_def, args: tool_def.name == "refund")
    agent = Agent(FunctionModel(script), toolsets=[held])
    durable = DurableAgent(agent, name="held", tools={
        "order_status": {"mutating": False, "trusted_output": True}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    key = approver(engine)
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    drive(engine)
    state = engine.state(run_id)
    assert state.status == "waiting"
    assert state.pending_approval is not None and state.pending_approval.tool == "refund"
    assert effects == ["status A1"]
    approve(engine, run_id, key)
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.result == "shipped | refunded 5"
    assert effects == ["status A1", "refund A1 5"]


def test_the_result_carries_the_taint_of_the_untrusted_output_that_shaped_it() -> None:
    effects: list[str] = []
    script = Script(("order_status", {"order": "A1"}))
    durable = DurableAgent(shop(script, effects), name="shop",
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "status of A1"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.tainted_by == ["order_status"]
