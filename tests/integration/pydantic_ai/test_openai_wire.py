"""A durable pydantic-ai agent whose model is pydantic-ai's own ``OpenAIChatModel``, talking
the Chat Completions wire format to a local server: what goes over the wire, what the
journal keeps (tokens, cost priced by genai-prices), and a budget that reads the quote."""

from __future__ import annotations

import asyncio

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

import underway as uw
from fakes.model_provider import FakeProvider, openai_completion, openai_error
from underway import events as ev
from underway.integrations.pydantic_ai import DurableAgent


def openai_model(server: FakeProvider) -> tuple[OpenAIChatModel, AsyncOpenAI]:
    client = AsyncOpenAI(base_url=f"{server.origin}/v1", api_key="sk-test")
    return OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client)), client


def drive(engine: uw.Engine, client: AsyncOpenAI) -> None:
    async def go() -> None:
        await uw.Runner(engine).run_until_idle()
        await client.close()  # its connections belong to this event loop

    asyncio.run(go())


def support(model: OpenAIChatModel, effects: list[str]) -> Agent[None, str]:
    agent = Agent(model, instructions="You help with orders.",
                  model_settings={"max_tokens": 200})

    @agent.tool_plain
    def order_status(order: str) -> str:
        """The status of an order."""
        effects.append(order)
        return "shipped"

    return agent


def test_an_openai_chat_agent_runs_durably_over_the_wire() -> None:
    effects: list[str] = []
    with FakeProvider(
        openai_completion(tool_calls=[("call_1", "order_status", '{"order": "A1"}')],
                          finish_reason="tool_calls", prompt_tokens=60, completion_tokens=9),
        openai_completion(content="Order A1 has shipped.", prompt_tokens=80,
                          completion_tokens=7),
    ) as server:
        model, client = openai_model(server)
        durable = DurableAgent(support(model, effects), name="support",
                               tools={"order_status": {"mutating": False}},
                               usage_limits=UsageLimits(total_tokens_limit=100_000))
        engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
        run_id, _ = engine.start(durable.flow, {"prompt": "Where is A1?"})
        drive(engine, client)

    state = engine.state(run_id)
    assert state.status == "completed", state
    assert state.result == "Order A1 has shipped."
    assert effects == ["A1"]
    first, second = (r.body for r in server.received)
    assert [r.path for r in server.received] == ["/v1/chat/completions"] * 2
    assert first["model"] == "gpt-4o-mini"
    assert 200 in (first.get("max_tokens"), first.get("max_completion_tokens"))
    assert first["tools"][0]["function"]["name"] == "order_status"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                      "content": "shipped"}
    responded = [e.event for e in engine.client.events(run_id)
                 if isinstance(e.event, ev.ModelResponded)]
    assert [(r.model, r.tokens_in, r.tokens_out) for r in responded] == [
        ("gpt-4o-mini-2024-07-18", 60, 9), ("gpt-4o-mini-2024-07-18", 80, 7)]
    # gpt-4o-mini at $0.15 / $0.60 per million tokens, from genai-prices.
    assert responded[0].cost_usd > 0
    assert abs(responded[0].cost_usd - (60 * 0.15 + 9 * 0.60) / 1e6) < 1e-9


def test_a_token_budget_refuses_a_request_whose_output_has_no_bound() -> None:
    with FakeProvider(openai_completion(content="never sent")) as server:
        model, client = openai_model(server)
        durable = DurableAgent(Agent(model), name="unbounded",
                               usage_limits=UsageLimits(total_tokens_limit=1000))
        engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
        run_id, _ = engine.start(durable.flow, {"prompt": "hello"})
        drive(engine, client)

    assert server.received == []
    state = engine.state(run_id)
    assert state.status == "escalated"
    assert state.escalation is not None and "max_tokens" in state.escalation.reason


def test_a_provider_outage_is_asked_again_on_a_durable_timer() -> None:
    with FakeProvider(
        openai_error(503, "overloaded, try again", {"retry-after": "7"}),
        openai_completion(content="Back again."),
    ) as server:
        client = AsyncOpenAI(base_url=f"{server.origin}/v1", api_key="sk-test", max_retries=0)
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
        durable = DurableAgent(Agent(model), name="outage")
        clock = uw.ManualClock(1.7e9)
        engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow], clock=clock)
        run_id, _ = engine.start(durable.flow, {"prompt": "hello"})

        async def go() -> None:
            runner = uw.Runner(engine)
            await runner.run_until_idle()
            # Waiting on a durable timer, holding no worker, as long as the provider asked.
            assert engine.state(run_id).status == "waiting"
            [retry] = [e.event for e in engine.client.events(run_id)
                       if isinstance(e.event, ev.RetryScheduled)]
            assert (retry.tool, retry.delay_s) == ("model", 7.0)
            clock.advance(8)
            await runner.run_until_idle()
            await client.close()

        asyncio.run(go())

    state = engine.state(run_id)
    assert state.status == "completed"
    assert state.result == "Back again."
    assert len(server.received) == 2
