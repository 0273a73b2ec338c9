"""A tool call that declares it needs a person (``approval.required``) is held for a signed
decision by the guard itself, whatever the policy: with no policy, under the engine's, under
the flow's; a deny still wins. The pydantic-ai integration maps ``requires_approval`` onto
it, so the engine's policy applies to a durable agent too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import underway as uw
from underway import events as ev
from underway.guard.policy import (
    APPROVAL_LABEL,
    Decision,
    Policy,
    Rule,
    approval_label,
    declared_approval,
)
from underway.integrations.pydantic_ai import DurableAgent


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


class Refund(BaseModel):
    order: str


class Nothing(BaseModel):
    pass


def world() -> tuple[uw.Flow[Any, Any], list[str]]:
    paid: list[str] = []

    @uw.tool
    async def refund(args: Refund) -> str:
        """Refund an order."""
        paid.append(args.order)
        return "refunded"

    flow: uw.Flow[Any, Any] = uw.Flow("declared", state=Nothing, tools=[refund])

    @flow.step(start=True)
    async def pay(ctx: uw.RunContext[Any, Any]) -> uw.flow.Next:
        await ctx.call(refund, {"order": "A1"}, labels=[approval_label("finance")])
        return ctx.done("paid")

    return flow, paid


def run(engine: uw.Engine, flow: uw.Flow[Any, Any]) -> uw.RunState:
    run_id, _ = engine.start(flow, None)
    asyncio.run(uw.Runner(engine).run_until_idle())
    return engine.state(run_id)


def test_the_decision_is_held_unless_denied_and_takes_the_declared_role() -> None:
    allow = Decision("allow", None, "p1", "fine")
    held = declared_approval(allow, frozenset({approval_label("finance")}))
    assert (held.outcome, held.rule_id, held.approver_role, held.policy_version) == (
        "require_approval", "tool-requires-approval", "finance", "p1")
    assert declared_approval(allow, frozenset({APPROVAL_LABEL})).approver_role is None
    assert declared_approval(allow, frozenset({"personal"})) is allow
    deny = Decision("deny", "no", "p1", "never")
    assert declared_approval(deny, frozenset({APPROVAL_LABEL})) is deny
    asked = Decision("require_approval", "big", "p1", "large", approver_role=None)
    kept = declared_approval(asked, frozenset({approval_label("ops")}))
    assert (kept.rule_id, kept.approver_role) == ("big", "ops")
    # A label that only starts like the approval label is not one.
    assert declared_approval(allow, frozenset({"approval.requiredx"})) is allow


def test_with_no_policy_at_all_the_call_waits_for_a_person(store_url: str) -> None:
    flow, paid = world()
    engine = uw.Engine(uw.connect(store_url), flows=[flow])
    state = run(engine, flow)
    assert state.status == "waiting" and paid == []
    assert state.pending_approval is not None
    assert (state.pending_approval.rule_id, state.pending_approval.required_role) == (
        "tool-requires-approval", "finance")


def test_an_engine_policy_that_allows_the_tool_still_holds_it(store_url: str) -> None:
    flow, paid = world()
    allowing = Policy("open-1", [Rule("all", tools=["refund"], outcome="allow")])
    engine = uw.Engine(uw.connect(store_url), flows=[flow], policy=allowing)
    state = run(engine, flow)
    assert state.status == "waiting" and paid == []


def test_a_deny_of_the_policy_wins_over_the_declaration(store_url: str) -> None:
    flow, paid = world()
    denying = Policy("shut-1", [Rule("none", tools=["refund"], outcome="deny",
                                     reason="refunds are closed")])
    engine = uw.Engine(uw.connect(store_url), flows=[flow], policy=denying)
    state = run(engine, flow)
    assert paid == []
    refused = [e.event for e in engine.client.events(state.run_id)
               if isinstance(e.event, ev.ToolRefused)]
    assert [r.cause for r in refused] == ["policy_denied"]


def _refund_once(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(p.part_kind in ("tool-return", "retry-prompt") for m in messages for p in m.parts):
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[ToolCallPart("refund", {"order": "A1"})])


def _durable(paid: list[str]) -> DurableAgent[None, str]:
    agent = Agent(FunctionModel(_refund_once))

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        paid.append(order)
        return "refunded"

    return DurableAgent(agent, name="desk", approver_role="finance")


def test_the_engines_policy_governs_a_durable_pydantic_ai_agent(store_url: str) -> None:
    # Denied by the engine's policy: the agent's own requires_approval cannot make it run.
    paid: list[str] = []
    durable = _durable(paid)
    denying = Policy("shut-1", [Rule("none", tools=["refund"], outcome="deny",
                                     reason="refunds are closed")])
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow], policy=denying)
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed" and paid == []
    refused = [e.event for e in engine.client.events(run_id)
               if isinstance(e.event, ev.ToolRefused)]
    assert [r.cause for r in refused] == ["policy_denied"]

    # Allowed by the engine's policy: the tool's requires_approval still holds it.
    held: list[str] = []
    durable = _durable(held)
    allowing = Policy("open-1", [Rule("all", tools=["refund"], outcome="allow")])
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow], policy=allowing)
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    asyncio.run(uw.Runner(engine).run_until_idle())
    state = engine.state(run_id)
    assert state.status == "waiting" and held == []
    assert state.pending_approval is not None
    assert (state.pending_approval.rule_id, state.pending_approval.required_role) == (
        "tool-requires-approval", "finance")
