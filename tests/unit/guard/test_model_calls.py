"""Model calls inside the guard: per-route budgets and durable retries of provider outages."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import drive, of_type
from underway import events as ev
from underway.effects import ModelReply
from underway.events import JSON
from underway.models import ModelError, ModelRouter, RouteBudget
from underway.testing import ScriptedModel, memory_engine


class S(BaseModel):
    pass


def test_a_route_budget_stops_the_call_that_would_overspend_it() -> None:
    small = ScriptedModel([{"label": i} for i in range(10)], name="small")
    large = ScriptedModel([{"plan": i} for i in range(10)], name="large")
    router = ModelRouter([small, large], routes={"classify": "small"},
                         default="large", budgets={"classify": RouteBudget(max_calls=2)})
    flow = uw.Flow("triage", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        await ctx.model(router, {"kind": "plan", "messages": []})
        for i in range(3):
            await ctx.model(router, {"kind": "classify", "i": i})
        return ctx.done()

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert s.status == "escalated" and len(small.requests) == 2 and len(large.requests) == 1
    over = of_type(engine, run_id, ev.BudgetExceeded)[0]
    assert over.metric == "route.classify.calls" and over.used == 2
    assert s.model_usage["classify"]["calls"] == 2 and s.model_usage["plan"]["calls"] == 1
    models = [e.model for e in of_type(engine, run_id, ev.ModelResponded)]
    assert models == ["large", "small", "small"], "the model id used is journaled per call"


class Flaky:
    """Fails with a retryable provider error twice, then answers."""

    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: JSON) -> ModelReply:
        self.calls += 1
        if self.calls <= 2:
            raise ModelError("test", "flaky-1", status=429, provider_message="rate limited",
                             retryable=True, retry_after=30.0)
        return ModelReply({"ok": True}, "flaky-1", 10, 2, 0.001)


def test_a_provider_outage_waits_on_a_durable_timer_and_asks_again() -> None:
    model = Flaky()
    flow = uw.Flow("patient", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.model(model, {"q": 1}))

    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    s = drive(engine, run_id)
    assert s.status == "waiting" and model.calls == 1
    retry = of_type(engine, run_id, ev.RetryScheduled)[0]
    assert (retry.tool, retry.attempt, retry.delay_s) == ("model", 2, 30.0)
    clock.advance(31)
    drive(engine, run_id)
    clock.advance(31)
    s = drive(engine, run_id)
    assert s.status == "completed" and s.result == {"ok": True} and model.calls == 3
    assert s.model_calls == 1
