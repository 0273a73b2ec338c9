"""The official SDK adapters, streamed: ``OpenAIChat`` and ``AnthropicMessages`` against local
servers that speak each provider's streaming wire format, through the real SDKs. Text and
tool-call deltas arrive as they are sent; the reply carries the usage and cost of the whole
answer; an answer cut mid-way is asked again, after a ``restart``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.model_provider import FakeProvider, anthropic_stream, openai_stream
from underway import events as ev
from underway.codec import stream_where
from underway.effects import ModelReply
from underway.events import JSON
from underway.models import (
    AnthropicMessages,
    Message,
    ModelRequest,
    OpenAIChat,
    Price,
    PriceTable,
    ToolSpec,
)
from underway.runner import Runner
from underway.store import connect

WEATHER = ToolSpec(name="get_weather", description="Weather for a city.",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}})
PRICES = PriceTable({"gpt-4o-mini*": Price(input=0.15, output=0.60),
                     "claude-sonnet-4*": Price(input=3.0, output=15.0)})


async def _sleep(seconds: float) -> None:
    """Retries wait for nothing here."""


def openai(server: FakeProvider) -> OpenAIChat:
    return OpenAIChat("gpt-4o-mini", api_key="sk-test", base_url=f"{server.origin}/v1",
                      prices=PRICES, sleep=_sleep, jitter=lambda: 0.5)


def anthropic(server: FakeProvider) -> AnthropicMessages:
    return AnthropicMessages("claude-sonnet-4-20250514", api_key="sk-ant-test",
                             base_url=server.origin, prices=PRICES, sleep=_sleep,
                             jitter=lambda: 0.5)


def streamed(model: Any, request: ModelRequest) -> tuple[ModelReply, list[JSON]]:
    got: list[JSON] = []

    async def emit(delta: JSON) -> None:
        got.append(delta)

    async def go() -> ModelReply:
        async with model:
            reply: ModelReply = await model.stream(request.to_json(), emit)
            return reply

    return asyncio.run(go()), got


def weather() -> ModelRequest:
    return ModelRequest(messages=[Message.user("Weather in Pune?")], tools=[WEATHER],
                        max_tokens=64)


def test_openai_streams_text_and_tool_call_deltas_and_prices_the_whole_answer() -> None:
    with FakeProvider(openai_stream(
            "Let me ", "check.", tool_calls=[("call_1", "get_weather", ['{"ci', 'ty": "Pune"}'])],
            prompt_tokens=1000, completion_tokens=200)) as server:
        reply, deltas = streamed(openai(server), weather())
    assert deltas == [
        {"type": "text", "text": "Let me "},
        {"type": "text", "text": "check."},
        {"type": "tool_call", "index": 0, "id": "call_1", "name": "get_weather",
         "arguments": ""},
        {"type": "tool_call", "index": 0, "id": None, "name": None, "arguments": '{"ci'},
        {"type": "tool_call", "index": 0, "id": None, "name": None,
         "arguments": 'ty": "Pune"}'},
    ]
    response = reply.response
    assert isinstance(response, dict)
    assert response["text"] == "Let me check." and response["stop_reason"] == "tool_calls"
    assert [(c["id"], c["name"], c["arguments"]) for c in response["tool_calls"]] == [
        ("call_1", "get_weather", {"city": "Pune"})]
    assert (reply.tokens_in, reply.tokens_out) == (1000, 200)
    assert reply.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.60) / 1e6)
    body = server.received[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_anthropic_streams_text_and_tool_call_deltas_and_prices_the_whole_answer() -> None:
    with FakeProvider(anthropic_stream(
            "Checking ", "now.", tool_calls=[("toolu_1", "get_weather", ['{"city"', ': "Pune"}'])],
            stop_reason="tool_use", input_tokens=1000, output_tokens=200)) as server:
        reply, deltas = streamed(anthropic(server), weather())
    assert deltas == [
        {"type": "text", "text": "Checking "},
        {"type": "text", "text": "now."},
        {"type": "tool_call", "index": 0, "id": "toolu_1", "name": "get_weather",
         "arguments": ""},
        {"type": "tool_call", "index": 0, "id": None, "name": None, "arguments": '{"city"'},
        {"type": "tool_call", "index": 0, "id": None, "name": None, "arguments": ': "Pune"}'},
    ]
    response = reply.response
    assert isinstance(response, dict)
    assert response["text"] == "Checking now." and response["stop_reason"] == "tool_calls"
    assert [(c["id"], c["arguments"]) for c in response["tool_calls"]] == [
        ("toolu_1", {"city": "Pune"})]
    assert (reply.tokens_in, reply.tokens_out) == (1000, 200)
    assert reply.cost_usd == pytest.approx((1000 * 3.0 + 200 * 15.0) / 1e6)
    assert server.received[0].body["stream"] is True


@pytest.mark.parametrize(("provider", "opening"), [("openai", 1), ("anthropic", 2)])
def test_an_answer_cut_mid_stream_is_asked_again_after_a_restart(
        provider: str, opening: int) -> None:
    make, wire = (openai, openai_stream) if provider == "openai" else (anthropic,
                                                                       anthropic_stream)
    cut = wire("one ", "two ", "three")
    # Cut after the opening events and two pieces of text.
    cut = type(cut)(**{**cut.__dict__, "cut_after": opening + 2})
    with FakeProvider(cut, wire("one ", "two ", "three")) as server:
        reply, deltas = streamed(make(server), ModelRequest(
            messages=[Message.user("Count")], max_tokens=16))
    texts = [d.get("text", d["type"]) for d in deltas]
    assert texts == ["one ", "two ", "restart", "one ", "two ", "three"]
    response = reply.response
    assert isinstance(response, dict) and response["text"] == "one two three"
    assert response["attempts"] == 2 and len(server.received) == 2


class S(BaseModel):
    pass


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_durable_streamed_call_journals_the_whole_answer_once(
        provider: str, sqlite_url: str) -> None:
    make, wire = (openai, openai_stream) if provider == "openai" else (anthropic,
                                                                       anthropic_stream)
    store = connect(sqlite_url)
    with FakeProvider(wire("The tide ", "turns ", "at noon.")) as server:
        model = make(server)
        flow = uw.Flow("tide", state=S)

        @flow.step
        async def ask(ctx: uw.RunContext[S, Any]) -> Any:
            reply = await ctx.model(model, ModelRequest(
                messages=[Message.user("When?")], max_tokens=32).to_json(), stream=True)
            return ctx.done(reply)

        engine = uw.Engine(store, flows=[flow])

        async def run() -> Any:
            async with model:
                run_id, _ = engine.start(flow)
                await Runner(engine).run_until_idle()
                return run_id

        run_id = asyncio.run(run())
    s = engine.state(run_id)
    assert s.status == "completed" and s.model_calls == 1
    [responded] = [r.event for r in engine.journal.history("default", run_id)
                   if isinstance(r.event, ev.ModelResponded)]
    assert isinstance(responded.response, dict)
    assert responded.response["text"] == "The tide turns at noon."
    assert responded.tokens_out > 0 and responded.cost_usd > 0
    assert s.cost_usd == pytest.approx(responded.cost_usd)
    rows = store.read_stream("default", run_id, after=0, limit=100)
    deltas = [json.loads(store.codec.open_text(d.data, stream_where(
        "default", run_id, d.key, d.attempt))) for _, d in rows]
    assert [d.get("text") for d in deltas if d["type"] == "text"] == [
        "The tide ", "turns ", "at noon."]
    assert deltas[-1] == {"type": "done"}
    store.close()


def test_an_agent_streams_its_model_calls(sqlite_url: str) -> None:
    store = connect(sqlite_url)
    with FakeProvider(openai_stream("Nothing ", "to do.")) as server:
        model = openai(server)
        agent = uw.Agent("quiet", model=model, tools=[], plan=False, stream=True,
                         max_tokens=32)
        engine = uw.Engine(store, flows=[agent.flow])

        async def run() -> str:
            async with model:
                run_id, _ = engine.start(agent.flow, {"goal": "rest"})
                await Runner(engine).run_until_idle()
                return run_id

        run_id = asyncio.run(run())
    s = engine.state(run_id)
    assert s.status == "completed" and s.result["result"] == "Nothing to do."
    texts = [d.delta.get("text") for d in uw.Client(store).read_stream(run_id)
             if isinstance(d.delta, dict) and d.delta["type"] == "text"]
    assert texts == ["Nothing ", "to do."] and s.model_calls == 1
    store.close()
