"""Traces record no argument or result value unless a tool opts in, per tool or per field,
and never a sensitive field; a child run joins its parent's trace; a step attempt that an
activation began and did not end is made once, by the activation that moves past it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, SecretStr

import underway as uw
from underway import events as ev
from underway.errors import ConfigurationError
from underway.journal.state import RunState
from underway.runner import Runner
from underway.telemetry import Tracing
from underway.testing import memory_engine

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}


def traced() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider), exporter


def attrs(span: ReadableSpan, prefix: str = "underway.tool.") -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if k.startswith(prefix)}


class Customer(BaseModel):
    id: str
    pin: SecretStr


class Pay(BaseModel):
    invoice: str
    customer: Customer
    card: str
    lines: list[dict[str, Any]]


@uw.tool(idempotent=True, trace_args=True, trace_result=("status", "detail"),
         sensitive=("card", "ssn"))
async def pay(args: Pay) -> dict[str, Any]:
    """Pay an invoice."""
    return {"status": "paid", "token": "tok-secret", "detail": {"ssn": "123-45", "ok": True}}


@uw.tool(mutating=False, trace_args=("invoice", "customer.id"))
async def look(args: dict[str, Any]) -> dict[str, Any]:
    """Look an invoice up."""
    return {"due": "secret-due"}


@uw.tool(mutating=False)
async def plain(args: dict[str, Any]) -> dict[str, Any]:
    """Records nothing."""
    return {"echo": args}


class S(BaseModel):
    done: bool = False


payments: uw.Flow[S, Any] = uw.Flow("payments", state=S, tools=[pay, look, plain])
ARGS = {"invoice": "INV-1", "customer": {"id": "c-7", "pin": "secret-pin"},
        "card": "secret-card", "lines": [{"sku": "a", "ssn": "secret-ssn"}]}


@payments.step
async def go(ctx: uw.RunContext[S, Any]) -> Any:
    await ctx.call(plain, {"note": "secret-note"})
    await ctx.call(look, {"invoice": "INV-1", "customer": {"id": "c-7", "name": "secret"}})
    await ctx.call(pay, ARGS)
    return ctx.done(None)


def test_only_the_fields_a_tool_opts_in_are_recorded_never_a_sensitive_one() -> None:
    tracing, exporter = traced()
    engine, _ = memory_engine([payments])
    engine.metrics = tracing
    engine.start(payments, None, trace_context=CALLER)
    asyncio.run(Runner(engine).run_until_idle())
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert attrs(spans["underway.tool plain"]) == {}
    assert attrs(spans["underway.tool look"]) == {
        "underway.tool.args.invoice": "INV-1", "underway.tool.args.customer.id": "c-7"}
    assert attrs(spans["underway.tool pay"]) == {
        "underway.tool.args.invoice": "INV-1",
        "underway.tool.args.customer.id": "c-7",
        "underway.tool.args.lines": '[{"sku":"a"}]',
        "underway.tool.result.status": "paid",
        "underway.tool.result.detail.ok": True,
    }
    for s in spans.values():
        assert "secret" not in repr(dict(s.attributes or {}))


def test_a_sensitive_field_cannot_be_opted_in() -> None:
    with pytest.raises(ConfigurationError, match="sensitive field 'pin'"):
        uw.tool(trace_args=("customer.pin",))(pay.fn)
    with pytest.raises(ConfigurationError, match="sensitive field 'card'"):
        uw.tool(trace_args=("card",), sensitive=("card",))(plain.fn)
    with pytest.raises(ConfigurationError, match="a tuple of field paths"):
        uw.tool(trace_result="status")(plain.fn)  # type: ignore[call-overload]
    assert pay.never_traced == {"card", "ssn", "pin"} and pay.traced and not plain.traced


parents: uw.Flow[S, Any] = uw.Flow("parents", state=S)
children: uw.Flow[S, Any] = uw.Flow("children", state=S)


@parents.step
async def spawn(ctx: uw.RunContext[S, Any]) -> Any:
    child = await ctx.start(children, None)
    await ctx.wait_for(child)
    return ctx.done(None)


@children.step
async def work(ctx: uw.RunContext[S, Any]) -> Any:
    return ctx.done(None)


def test_a_child_run_joins_its_parents_trace() -> None:
    tracing, exporter = traced()
    engine, _ = memory_engine([parents, children])
    engine.metrics = tracing
    engine.start(parents, None, trace_context=CALLER)
    asyncio.run(Runner(engine).run_until_idle())
    spans = exporter.get_finished_spans()
    assert "underway.activation children" in {s.name for s in spans}
    assert {format(s.context.trace_id, "032x") for s in spans if s.context} == {TRACE_ID}


def state() -> RunState:
    s = RunState(tenant_id="t", run_id="r", flow="f", status="ready", attempt=1)
    s.trace_context = CALLER
    return s


ATTEMPT: list[tuple[int, float, ev.RunEvent]] = [
    (5, 10.0, ev.StepStarted(step="a", attempt=1)),
    (6, 11.0, ev.ToolSucceeded(key="k", tool="x", index=0, args_hash="h", result=None)),
]


def test_an_attempt_left_unended_is_made_once_by_the_activation_that_moves_past_it() -> None:
    tracing, exporter = traced()

    def names() -> list[str]:
        return sorted(s.name for s in exporter.get_finished_spans()
                      if not s.name.startswith("underway.activation"))

    # The first activation commits part of a step, then loses its lease: nothing of the
    # attempt is made (the next activation will make it from the journal).
    tracing.activated(state(), wake_latency=None, takeover=False)
    tracing.committed("t", "r", "f", ATTEMPT)
    tracing.abandoned("t", "r")
    tracing.left("t", "r")
    assert names() == []
    # A takeover that commits nothing leaves it to the next one.
    tracing.activated(state(), wake_latency=None, takeover=True)
    tracing.interrupted("t", "r", "f", ATTEMPT)
    tracing.abandoned("t", "r")
    tracing.left("t", "r")
    assert names() == []
    # The takeover that commits makes it, marked recovered, before its own attempt.
    tracing.activated(state(), wake_latency=None, takeover=True)
    tracing.interrupted("t", "r", "f", ATTEMPT)
    tracing.committed("t", "r", "f", [(7, 12.0, ev.StepStarted(step="a", attempt=2))])
    assert names() == ["underway.step a", "underway.tool x"]
    (recovered,) = [s for s in exporter.get_finished_spans() if s.name == "underway.step a"]
    assert (recovered.attributes or {})["underway.recovered"] is True
    assert recovered.start_time == 10_000_000_000 and recovered.end_time == 11_000_000_000
    tracing.committed("t", "r", "f", [(8, 13.0, ev.StepCompleted(step="a", next=None, patch=[]))])
    tracing.left("t", "r")
    assert names() == ["underway.step a", "underway.step a", "underway.tool x"]
