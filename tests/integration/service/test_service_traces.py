"""OpenTelemetry traces, exported from the journal to the SDK's in-memory exporter, on
SQLite and PostgreSQL: a run started over HTTP, with a ``traceparent`` or without one, is
one trace: its root span (below the caller's span when there is one), its steps, and its
tool call, policy decision and model call below them, with no argument values; a run that
waits for an approval and is activated again stays in its trace, and the wait is a span
from the request to the decision."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

import underway as uw
from underway.apikeys import issue_key
from underway.clock import ManualClock
from underway.effects import ModelReply
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.guard.policy import policy_from_dict
from underway.lineage import root_span_id
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


@pytest.mark.parametrize("caller", [True, False], ids=["traceparent", "none"])
def test_a_run_is_one_trace_without_argument_values(db_url: str, caller: bool) -> None:
    exporter = InMemorySpanExporter()
    clock = ManualClock(time.time())
    store, worker_store = connect(db_url), connect(db_url)
    tracing = Tracing(worker_store, exporter, flows=[orders], recover_window=None)
    engine = uw.Engine(worker_store, flows=[orders], clock=clock,
                       metrics=Fanout(PrometheusMetrics(), tracing))
    app = create_app(uw.Client(store, clock=clock))
    token = issue_key(store, tenant_id="acme", role="operator", name="op",
                      now=clock.now()).token
    headers = {"Authorization": f"Bearer {token}"}
    if caller:
        headers["traceparent"] = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            r = http.post("/v1/runs", json={"flow": "orders", "input": {"card": SECRET}},
                          headers=headers)
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
        asyncio.run(Runner(engine).run_until_idle())
        tracing.shutdown()
    finally:
        store.close()
        worker_store.close()

    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == sorted([
        "underway.run orders", "underway.step pay", "underway.step finish",
        "underway.policy charge", "execute_tool charge", "chat claude-test"])
    assert len(spans) == 6
    trace_ids = {format(s.context.trace_id, "032x") for s in spans}
    assert len(trace_ids) == 1
    if caller:
        assert trace_ids == {TRACE_ID}

    def parent(s: ReadableSpan) -> str:
        if s.parent is None:
            return "none"
        if s.parent.span_id == int(CALLER_SPAN, 16):
            return "caller"
        return next(p.name for p in spans if p.context.span_id == s.parent.span_id)

    root = by_name["underway.run orders"]
    assert parent(root) == ("caller" if caller else "none")
    assert format(root.context.span_id, "016x") == root_span_id(run_id)
    assert root.attributes is not None and root.attributes["underway.run_id"] == run_id
    assert parent(by_name["underway.step pay"]) == root.name
    assert parent(by_name["underway.step finish"]) == root.name
    for child in ("underway.policy charge", "execute_tool charge", "chat claude-test"):
        assert parent(by_name[child]) == "underway.step pay"
    assert dict(by_name["underway.policy charge"].attributes or {})[
        "underway.policy.decision"] == "allow"
    assert dict(by_name["execute_tool charge"].attributes or {})[
        "underway.outcome"] == "Succeeded"
    model = dict(by_name["chat claude-test"].attributes or {})
    assert model["gen_ai.provider.name"] == "anthropic" and "gen_ai.system" not in model
    assert model["gen_ai.request.model"] == model["gen_ai.response.model"] == "claude-test"
    assert (model["gen_ai.usage.input_tokens"], model["gen_ai.usage.output_tokens"]) == (12, 7)
    # No arguments, results or prompts anywhere.
    for s in spans:
        text = repr(dict(s.attributes or {})) + repr([e.attributes for e in s.events])
        assert SECRET not in text and "charged" not in text and "prompt" not in text


@uw.tool(irreversible=True)
async def refund(args: Order) -> dict[str, Any]:
    """Refund a card."""
    return {"refunded": args.card}


HELD = policy_from_dict({"version": "v1", "rules": [
    {"id": "refunds", "tools": ["refund"], "outcome": "require_approval",
     "approver_role": "finance", "expires_in": 3600}]})
refunds: uw.Flow[Seen, Order] = uw.Flow("refunds", state=Seen, input=Order, tools=[refund],
                                        policy=HELD)


@refunds.step
async def pay_back(ctx: uw.RunContext[Seen, Order]) -> Any:
    return ctx.done(await ctx.call(refund, {"card": ctx.input.card}))


def test_an_approval_wait_is_a_span_from_request_to_decision(db_url: str) -> None:
    exporter = InMemorySpanExporter()
    clock = ManualClock(1.7e9)
    store = connect(db_url)
    tracing = Tracing(store, exporter, flows=[refunds], recover_window=None)
    engine = uw.Engine(store, flows=[refunds], clock=clock, metrics=tracing)
    key = Ed25519PrivateKey.generate()
    register_approver(store, "fin", public_key=public_key_of(key), roles=["finance"],
                      now=clock.now())
    try:
        run_id, _ = engine.client.start(
            refunds, {"card": SECRET},
            trace_context={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
        asyncio.run(Runner(engine).run_until_idle())
        s = engine.state(run_id)
        asked = s.pending_approval
        assert s.status == "waiting" and asked is not None
        clock.advance(60)
        engine.submit_decision(sign_decision(
            key, request_id=asked.request_id, run_id=run_id, tenant_id="default",
            tool="refund", args_hash=asked.args_hash, decision="approve",
            expires_at=asked.expires_at, approver_id="fin").model_dump(mode="json"))
        asyncio.run(Runner(engine).run_until_idle())
        assert engine.state(run_id).status == "completed"
        tracing.shutdown()
    finally:
        store.close()

    spans = exporter.get_finished_spans()
    assert {format(x.context.trace_id, "032x") for x in spans} == {TRACE_ID}
    (wait,) = [x for x in spans if x.name == "underway.approval_wait"]
    assert wait.start_time is not None and wait.end_time is not None
    assert (wait.end_time - wait.start_time) / 1e9 == pytest.approx(60.0)
    assert dict(wait.attributes or {})["underway.approval.outcome"] == "granted"
    # Two activations (before the wait and after the decision), one trace, one root.
    assert [x.name for x in spans].count("underway.step pay_back") == 2
    assert [x.name for x in spans].count("underway.run refunds") == 1
    assert [x.name for x in spans].count("execute_tool refund") == 1
    for x in spans:
        assert SECRET not in repr(dict(x.attributes or {}))
