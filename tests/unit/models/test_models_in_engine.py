"""Adapters and the router driven by a real engine: what the journal records of model calls."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.model_provider import FakeProvider, anthropic_message, openai_completion
from underway import events as ev
from underway.engine import Engine
from underway.models import (
    AnthropicMessages,
    Message,
    ModelRequest,
    ModelResponse,
    ModelRouter,
    OpenAIChat,
    RouteBudget,
    RouteBudgetExceeded,
)
from underway.testing import memory_engine

OPENAI_KEY = "sk-test-journal-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-journal-0123456789abcdef"


class Triage(BaseModel):
    label: str = ""
    plan: str = ""


def journal(engine: Engine, run_id: str) -> list[ev.Event]:
    return [r.event for r in engine.journal.history("default", run_id)]


def triage_flow(model: uw.Model) -> uw.Flow[Triage, Any]:
    flow = uw.Flow("triage", state=Triage)

    @flow.step
    async def classify(ctx: uw.RunContext[Triage, Any]) -> Any:
        raw = await ctx.model(model, ModelRequest(
            messages=[Message.user("Customer says: my parcel never came.")],
            kind="classify", max_tokens=20,
        ).to_json())
        ctx.state.label = ModelResponse.from_json(raw).text or ""
        return ctx.goto(plan)

    @flow.step
    async def plan(ctx: uw.RunContext[Triage, Any]) -> Any:
        raw = await ctx.model(model, ModelRequest(
            messages=[Message.system("Plan the next steps."), Message.user(ctx.state.label)],
            kind="plan",
        ).to_json())
        ctx.state.plan = ModelResponse.from_json(raw).text or ""
        return ctx.done({"label": ctx.state.label, "plan": ctx.state.plan})

    return flow


async def finish(engine: Engine, run_id: str, *adapters: Any) -> uw.RunState:
    try:
        return await uw.Runner(engine).run_until_complete(run_id)
    finally:
        for a in adapters:
            await a.aclose()


def test_an_adapter_in_a_flow_journals_model_id_tokens_and_cost_without_the_key() -> None:
    with FakeProvider(
        openai_completion(content="missing-parcel", prompt_tokens=40, completion_tokens=3),
        openai_completion(content="1. refund", prompt_tokens=60, completion_tokens=4),
    ) as server:
        model = OpenAIChat("gpt-4o-mini", api_key=OPENAI_KEY, base_url=f"{server.origin}/v1")
        engine, _ = memory_engine([triage_flow(model)])
        run_id, _ = engine.start("triage")
        state = asyncio.run(finish(engine, run_id, model))

    assert state.status == "completed"
    assert state.result == {"label": "missing-parcel", "plan": "1. refund"}
    events = journal(engine, run_id)
    responded = [e for e in events if isinstance(e, ev.ModelResponded)]
    assert [(e.model, e.tokens_in, e.tokens_out) for e in responded] == [
        ("gpt-4o-mini-2024-07-18", 40, 3), ("gpt-4o-mini-2024-07-18", 60, 4)]
    assert responded[0].cost_usd == pytest.approx((40 * 0.15 + 3 * 0.60) / 1e6)
    assert responded[0].request["kind"] == "classify"
    assert ModelResponse.from_json(responded[1].response).text == "1. refund"
    assert len(server.received) == 2
    assert all(OPENAI_KEY not in e.model_dump_json() for e in events)


def test_a_router_sends_each_kind_to_its_model_and_budgets_come_from_the_journal() -> None:
    with FakeProvider(openai_completion(content="missing-parcel", prompt_tokens=30,
                                        completion_tokens=2)) as small_server, \
         FakeProvider(anthropic_message({"type": "text", "text": "Refund, then apologise."},
                                        input_tokens=500, output_tokens=50)) as large_server:
        small = OpenAIChat("gpt-4o-mini", name="small", api_key=OPENAI_KEY,
                           base_url=f"{small_server.origin}/v1")
        large = AnthropicMessages("claude-sonnet-4-20250514", name="large",
                                  api_key=ANTHROPIC_KEY, base_url=large_server.origin)
        router = ModelRouter(
            [small, large], {"classify": "small", "extract": "small", "plan": "large"},
            default="large", budgets={"plan": RouteBudget(max_calls=1, max_cost_usd=1.0)},
        )
        engine, _ = memory_engine([triage_flow(router)])
        run_id, _ = engine.start("triage")
        state = asyncio.run(finish(engine, run_id, small, large))

    assert state.status == "completed"
    events = journal(engine, run_id)
    assert [e.model for e in events if isinstance(e, ev.ModelResponded)] == [
        "gpt-4o-mini-2024-07-18", "claude-sonnet-4-20250514"]
    assert len(small_server.received) == len(large_server.received) == 1

    usage = router.usage(events)
    assert (usage["classify"].calls, usage["classify"].tokens) == (1, 32)
    assert (usage["plan"].calls, usage["plan"].tokens) == (1, 550)
    assert usage["plan"].cost_usd == pytest.approx((500 * 3 + 50 * 15) / 1e6)
    # The plan route has spent its one call; classify has no budget.
    [breach] = router.breaches(events, "plan")
    assert (breach.route, breach.limit, breach.allowed, breach.used) == ("plan", "calls", 1, 1)
    assert router.breaches(events, "classify") == []
    with pytest.raises(RouteBudgetExceeded, match="route 'plan' used 1 of 1 calls"):
        router.ensure_within_budget(events, "plan")
    assert all(ANTHROPIC_KEY not in e.model_dump_json() for e in events)
