"""An unmodified pydantic-ai agent run by underway: journaled model requests and tool calls,
the agent's output as the run's result, streaming to the agent's handler, and a re-run that
reads the journal instead of asking again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    ToolCallPart,
    ToolCallPartDelta,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext as PaiContext

import underway as uw
from underway import events as ev
from underway.codec import stream_where
from underway.integrations.pydantic_ai import DurableAgent
from underway.integrations.pydantic_ai._model import delta_of


def drive(engine: uw.Engine) -> None:
    asyncio.run(uw.Runner(engine).run_until_idle())


def kinds(engine: uw.Engine, run_id: str) -> list[str]:
    return [type(e.event).__name__ for e in engine.client.events(run_id)]


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def lookup_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for the order's status, then answers with what the tool said."""
    done = tool_returns(messages)
    if done:
        return ModelResponse(parts=[TextPart(f"Order status: {done[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("order_status", {"order": "A1"})])


def support_agent(effects: list[str]) -> Agent[None, str]:
    agent = Agent(FunctionModel(lookup_then_answer), instructions="Help with orders.")

    @agent.tool_plain
    def order_status(order: str) -> str:
        """The status of an order."""
        effects.append(order)
        return "shipped"

    return agent


def test_a_function_model_run_journals_each_request_and_call_and_returns_the_output(
    store_url: str,
) -> None:
    effects: list[str] = []
    durable = DurableAgent(support_agent(effects), name="support",
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect(store_url), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "Where is order A1?"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.result == "Order status: shipped"
    assert effects == ["A1"]
    assert kinds(engine, run_id) == [
        "RunStarted", "StepStarted", "ModelResponded", "PolicyDecided", "ToolSucceeded",
        "ModelResponded", "StepCompleted", "RunCompleted"]
    responded = [e.event for e in engine.client.events(run_id)
                 if isinstance(e.event, ev.ModelResponded)]
    assert responded[0].model == "function:lookup_then_answer:"
    # The request is pydantic-ai's own messages: the second carries the tool's return.
    second = responded[1].request
    assert isinstance(second, dict)
    parts = [p for m in second["messages"] for p in m["parts"]]
    assert {"part_kind": "tool-return", "tool_name": "order_status",
            "content": "shipped"}.items() <= parts[-1].items()


class Receipt(BaseModel):
    order: str
    refunded: bool


def test_test_model_calls_every_tool_and_a_structured_output_is_the_result() -> None:
    effects: list[str] = []
    agent = Agent(TestModel(), output_type=Receipt)

    @agent.tool_plain
    def refund(order: str) -> str:
        effects.append(order)
        return f"refunded {order}"

    durable = DurableAgent(agent, name="refunds")
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "Refund it"})
    drive(engine)

    state = engine.state(run_id)
    assert state.status == "completed", state
    assert state.result == {"order": "a", "refunded": False}
    assert effects == ["a"]
    assert kinds(engine, run_id).count("ToolStarted") == 1  # mutating: intent first


def test_the_event_stream_handler_sees_the_live_events_of_a_durable_run() -> None:
    async def streamed(messages: list[ModelMessage], info: AgentInfo
                       ) -> AsyncIterator[str | DeltaToolCalls]:
        if tool_returns(messages):
            for word in ("Order ", "status: ", "shipped"):
                yield word
            return
        yield {0: _call_delta()}

    seen: list[Any] = []

    async def handler(ctx: PaiContext[Any], events: AsyncIterable[Any]) -> None:
        async for event in events:
            seen.append(event)

    agent = Agent(FunctionModel(stream_function=streamed))

    @agent.tool_plain
    def order_status(order: str) -> str:
        return "shipped"

    durable = DurableAgent(agent, name="streaming", event_stream_handler=handler,
                           tools={"order_status": {"mutating": False}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "Where is A1?"})
    drive(engine)

    assert engine.state(run_id).status == "completed"
    assert engine.state(run_id).result == "Order status: shipped"
    deltas = [e.delta.content_delta for e in seen if isinstance(e, PartDeltaEvent)
              and hasattr(e.delta, "content_delta")]
    assert "".join(deltas) == "status: shipped"
    # Journaled once each, as complete responses.
    assert kinds(engine, run_id).count("ModelResponded") == 2
    # The same deltas reached the run's live stream, in the shapes every reader knows (the
    # stream keeps the last streamed call's).
    deltas = live(engine, run_id)
    assert "".join(d["text"] for d in deltas if d["type"] == "text") == \
        "Order status: shipped"
    assert {d["type"] for d in deltas} == {"text", "pydantic_ai", "done"}
    assert deltas[-1] == {"type": "done"}


def test_a_tool_call_streams_as_a_tool_call_delta() -> None:
    start = PartStartEvent(index=0, part=ToolCallPart("order_status", {"order": "A1"},
                                                      tool_call_id="c1"))
    more = PartDeltaEvent(index=0, delta=ToolCallPartDelta(args_delta='"}',
                                                           tool_call_id="c1"))
    assert delta_of(start) == {"type": "tool_call", "index": 0, "id": "c1",
                               "name": "order_status", "arguments": '{"order": "A1"}'}
    assert delta_of(more) == {"type": "tool_call", "index": 0, "id": "c1", "name": None,
                              "arguments": '"}'}


def live(engine: uw.Engine, run_id: str) -> list[Any]:
    """The run's live stream, decoded."""
    return [json.loads(engine.store.codec.open_text(
                d.data, stream_where("default", run_id, d.key, d.attempt)))
            for _, d in engine.store.read_stream("default", run_id, after=0, limit=1000)]


def _call_delta() -> Any:
    from pydantic_ai.models.function import DeltaToolCall

    return DeltaToolCall(name="order_status", json_args='{"order": "A1"}', tool_call_id="c1")


def test_importing_without_pydantic_ai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    for name in [n for n in sys.modules if n.startswith(("pydantic_ai",
                                                         "underway.integrations.pydantic_ai"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    with pytest.raises(uw.ConfigurationError, match=r"pip install 'underway\[pydantic-ai\]'"):
        importlib.import_module("underway.integrations.pydantic_ai")


def test_an_agent_without_a_model_is_refused_with_the_reason() -> None:
    with pytest.raises(uw.ConfigurationError, match="has no model"):
        DurableAgent(Agent(), name="nomodel")
    with pytest.raises(uw.ConfigurationError, match="unknown options"):
        DurableAgent(Agent(TestModel()), name="bad", tools={"x": {"mutable": True}})
