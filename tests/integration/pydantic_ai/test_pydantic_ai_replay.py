"""A pydantic-ai run replays and passes deploy check without a model or a tool: unchanged
code reports no change; a changed tool list or instruction is a change, named."""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import underway as uw
from underway.integrations.pydantic_ai import DurableAgent
from underway.ops.deploy import check_deploy
from underway.ops.replay import replay_run


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returned = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
    if returned:
        return ModelResponse(parts=[TextPart(f"Order status: {returned[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("order_status", {"order": "A1"})])


def durable(effects: list[str], *, held: bool = False) -> DurableAgent[None, str]:
    agent = Agent(FunctionModel(answer), instructions="Help with orders.")

    @agent.tool_plain(requires_approval=held)
    def order_status(order: str) -> str:
        """The status of an order."""
        effects.append(order)
        return "shipped"

    return DurableAgent(agent, name="support", tools={"order_status": {"mutating": False}})


def test_replay_and_deploy_check_find_no_change_on_unchanged_code(store_url: str) -> None:
    effects: list[str] = []
    made = durable(effects)
    engine = uw.Engine(uw.connect(store_url), flows=[made.flow])
    run_id, _ = engine.start(made.flow, {"prompt": "Where is order A1?"})
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed"
    assert effects == ["A1"]

    # The same code in a new process: the journal answers every request and call.
    again: list[str] = []
    fresh = durable(again)
    replayed = asyncio.run(replay_run(engine.store, run_id, flows=[fresh.flow]))
    assert replayed.divergences == [] and replayed.changes == []
    assert again == []  # nothing ran for real


def test_deploy_check_of_a_waiting_run_finds_no_change_on_unchanged_code(
        store_url: str) -> None:
    effects: list[str] = []
    made = durable(effects, held=True)
    engine = uw.Engine(uw.connect(store_url), flows=[made.flow])
    run_id, _ = engine.start(made.flow, {"prompt": "Where is order A1?"})
    asyncio.run(uw.Runner(engine).run_until_idle())
    state = engine.state(run_id)
    assert state.status == "waiting" and state.pending_approval is not None
    report = asyncio.run(check_deploy(engine.store, [durable([], held=True).flow]))
    assert report.ok and (report.checked, report.rerun) == (1, 1), report
    assert effects == []
