"""OpenTelemetry traces with the SDK's in-memory exporter: a run started over HTTP with a
``traceparent`` yields, from the worker, an activation span in the caller's trace with its
steps, tool call, policy decision and model call below it, and no argument values."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

import underway as uw
from underway.apikeys import issue_key
from underway.clock import ManualClock
from underway.effects import ModelReply
from underway.policy import policy_from_dict
from underway.runner import Runner
from underway.service import ServerThread, create_app
from underway.store import connect
from underway.telemetry import Fanout, PrometheusMetrics, Tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
SECRET = "card-4111-1111"


class Order(BaseModel):
    card: str


class Seen(BaseModel):
    done: bool = False


class FixedModel:
    name = "claude-test"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": "fine"}, "claude-test", 12, 7, 0.01)


@uw.tool(idempotent=True)
async def charge(args: Order) -> dict[str, Any]:
    """Charge a card."""
    return {"charged": args.card}


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "charges", "tools": ["charge"], "outcome": "allow"}]})
orders: uw.Flow[Seen, Order] = uw.Flow("orders", state=Seen, input=Order, tools=[charge],
                                       policy=POLICY)


@orders.step
async def pay(ctx: uw.RunContext[Seen, Order]) -> Any:
    await ctx.call(charge, {"card": ctx.input.card})
    await ctx.model(FixedModel(), {"prompt": f"was {ctx.input.card} charged?"})
    return ctx.goto(finish)


@orders.step
async def finish(ctx: uw.RunContext[Seen, Order]) -> Any:
    return ctx.done({"ok": True})


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


def test_a_run_joins_the_callers_trace_without_argument_values(db_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = ManualClock(time.time())
    store, worker_store = connect(db_url), connect(db_url)
    engine = uw.Engine(worker_store, flows=[orders], clock=clock,
                       metrics=Fanout(PrometheusMetrics(), Tracing(provider)))
    app = create_app(uw.Client(store, clock=clock))
    token = issue_key(store, tenant_id="acme", role="operator", name="op",
                      now=clock.now()).token
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            r = http.post("/v1/runs", json={"flow": "orders", "input": {"card": SECRET}},
                          headers={"Authorization": f"Bearer {token}",
                                   "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
        asyncio.run(Runner(engine).run_until_idle())
    finally:
        store.close()
        worker_store.close()

    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == sorted([
        "underway.activation orders", "underway.step pay", "underway.step finish",
        "underway.policy charge", "underway.tool charge", "chat claude-test"])
    assert len(spans) == 6
    assert {format(s.context.trace_id, "032x") for s in spans} == {TRACE_ID}

    def parent(s: ReadableSpan) -> str:
        assert s.parent is not None
        return next(p.name for p in spans if p.context.span_id == s.parent.span_id) \
            if s.parent.span_id != int(CALLER_SPAN, 16) else "caller"

    act = by_name["underway.activation orders"]
    assert parent(act) == "caller"
    assert act.attributes is not None and act.attributes["underway.run_id"] == run_id
    assert parent(by_name["underway.step pay"]) == act.name
    assert parent(by_name["underway.step finish"]) == act.name
    for child in ("underway.policy charge", "underway.tool charge", "chat claude-test"):
        assert parent(by_name[child]) == "underway.step pay"
    assert dict(by_name["underway.policy charge"].attributes or {})[
        "underway.policy.decision"] == "allow"
    assert dict(by_name["underway.tool charge"].attributes or {})[
        "underway.outcome"] == "Succeeded"
    model = dict(by_name["chat claude-test"].attributes or {})
    assert model["gen_ai.system"] == "anthropic"
    assert model["gen_ai.request.model"] == model["gen_ai.response.model"] == "claude-test"
    assert (model["gen_ai.usage.input_tokens"], model["gen_ai.usage.output_tokens"]) == (12, 7)
    # No arguments, results or prompts anywhere.
    for s in spans:
        text = repr(dict(s.attributes or {})) + repr([e.attributes for e in s.events])
        assert SECRET not in text and "charged" not in text and "prompt" not in text
