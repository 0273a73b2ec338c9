"""Traces are derived from the journal: no argument or result value is recorded unless a
tool opts in, per tool or per field, and never a sensitive field; every run has one trace
(minted at start when none is given), and its children and forks sit below its root span;
the same journal gives the same spans with the same ids, whole or fed in parts; the GenAI
conventions' names and attributes are used."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, SecretStr

import underway as uw
from underway import events as ev
from underway.effects import ModelReply
from underway.errors import ConfigurationError
from underway.events import JSON
from underway.lineage import root_span_id
from underway.models import ModelResponse
from underway.runner import Runner
from underway.telemetry import Tracing
from underway.telemetry._spans import RunSpans, run_spans, span_id
from underway.testing import RuleModel, memory_engine, say

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}


def hexed(span: ReadableSpan) -> tuple[str, str, str | None]:
    """A span's trace id, span id and parent id, in hex."""
    assert span.context is not None
    return (format(span.context.trace_id, "032x"), format(span.context.span_id, "016x"),
            None if span.parent is None else format(span.parent.span_id, "016x"))


def run(flows: list[uw.Flow[Any, Any]], flow: uw.Flow[Any, Any], input: Any = None,
        **start: Any) -> tuple[uw.Engine, str, list[ReadableSpan]]:
    """Run ``flow`` to its end with traces on; the engine, the run and every span sent."""
    engine, _ = memory_engine(flows)
    exporter = InMemorySpanExporter()
    tracing = Tracing(engine.store, exporter, flows=flows, recover_window=None)
    engine.metrics = tracing
    run_id, _ = engine.start(flow, input, **start)
    asyncio.run(Runner(engine).run_until_idle())
    tracing.shutdown()
    return engine, run_id, list(exporter.get_finished_spans())


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
    _, _, sent = run([payments], payments, trace_context=CALLER)
    spans = {s.name: s for s in sent}
    assert attrs(spans["execute_tool plain"]) == {}
    assert attrs(spans["execute_tool look"]) == {
        "underway.tool.args.invoice": "INV-1", "underway.tool.args.customer.id": "c-7"}
    assert attrs(spans["execute_tool pay"]) == {
        "underway.tool.args.invoice": "INV-1",
        "underway.tool.args.customer.id": "c-7",
        "underway.tool.args.lines": '[{"sku":"a"}]',
        "underway.tool.result.status": "paid",
        "underway.tool.result.detail.ok": True,
    }
    assert attrs(spans["execute_tool pay"], "gen_ai.") == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "pay",
        "gen_ai.tool.call.id": attrs(spans["execute_tool pay"], "gen_ai.tool.call.id")[
            "gen_ai.tool.call.id"], "gen_ai.tool.type": "function"}
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


def test_a_run_started_without_a_trace_context_is_one_trace_with_its_children() -> None:
    engine, run_id, spans = run([parents, children], parents)
    started = engine.client.history(run_id)[0].event
    assert isinstance(started, ev.RunStarted) and started.trace_context is not None
    (trace_id,) = {hexed(s)[0] for s in spans}
    assert started.trace_context["traceparent"].split("-")[1] == trace_id
    (root,) = [s for s in spans if s.name == "underway.run parents"]
    assert hexed(root) == (trace_id, root_span_id(run_id), None)
    (child_root,) = [s for s in spans if s.name == "underway.run children"]
    assert hexed(child_root)[2] == root_span_id(run_id)
    (child_id,) = [e.run_id for e in (r.event for r in engine.client.history(run_id))
                   if isinstance(e, ev.ChildStarted)]
    (work_step,) = [s for s in spans if s.name == "underway.step work"]
    assert hexed(work_step)[2] == root_span_id(child_id)


def test_a_run_started_in_a_callers_trace_stays_in_it_with_its_children() -> None:
    _, run_id, spans = run([parents, children], parents, trace_context=CALLER)
    assert {hexed(s)[0] for s in spans} == {TRACE_ID}
    (root,) = [s for s in spans if s.name == "underway.run parents"]
    assert hexed(root)[2] == CALLER_SPAN
    (child_root,) = [s for s in spans if s.name == "underway.run children"]
    assert hexed(child_root)[2] == root_span_id(run_id)


def test_an_invalid_traceparent_starts_a_trace_of_its_own() -> None:
    engine, run_id, spans = run([children], children,
                                trace_context={"traceparent": "00-zz-nothex-01"})
    (root,) = [s for s in spans if s.name == "underway.run children"]
    assert hexed(root)[2] is None
    started = engine.client.history(run_id)[0].event
    assert isinstance(started, ev.RunStarted) and started.trace_context is not None
    assert started.trace_context["traceparent"].split("-")[2] == root_span_id(run_id)


def test_a_fork_sits_below_its_original_in_the_same_trace() -> None:
    engine, _ = memory_engine([children])
    run_id, _ = engine.start(children, None)
    asyncio.run(Runner(engine).run_until_idle())
    fork = engine.client.fork(run_id, at_seq=1, by="ops")
    started = engine.client.history(fork.run_id)[0].event
    original = engine.client.history(run_id)[0].event
    assert isinstance(started, ev.RunStarted) and isinstance(original, ev.RunStarted)
    assert started.trace_context is not None and original.trace_context is not None
    ours, theirs = (c["traceparent"].split("-") for c in (started.trace_context,
                                                           original.trace_context))
    assert ours[1] == theirs[1] and ours[2] == root_span_id(run_id)


class FixedModel:
    name = "claude-x"

    async def complete(self, request: JSON) -> ModelReply:
        # As an adapter answers: its response, as journaled, tells the cache reads.
        response = ModelResponse(text="hi", model="claude-x-2025", tokens_in=30,
                                 tokens_out=5, cached_tokens_in=20, cost_usd=0.02)
        return ModelReply(response.to_json(), "claude-x-2025", 30, 5, 0.02)


class Flaky:
    name = "gpt-flaky"

    async def complete(self, request: JSON) -> ModelReply:
        raise RateLimited("slow down")


class RateLimited(Exception):
    retryable = True


chatty: uw.Flow[S, Any] = uw.Flow("chatty", state=S)


@chatty.step
async def talk(ctx: uw.RunContext[S, Any]) -> Any:
    await ctx.model(FixedModel(), {"messages": []})
    return ctx.done(None)


def test_a_chat_span_follows_the_genai_conventions() -> None:
    _, _, spans = run([chatty], chatty)
    (chat,) = [s for s in spans if s.name.startswith("chat ")]
    assert chat.name == "chat claude-x-2025" and chat.kind.name == "CLIENT"
    assert attrs(chat, "gen_ai.") == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-x-2025", "gen_ai.response.model": "claude-x-2025",
        "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 20}


flaky: uw.Flow[S, Any] = uw.Flow("flaky", state=S)


@flaky.step
async def ask(ctx: uw.RunContext[S, Any]) -> Any:
    await ctx.model(Flaky(), {"messages": []})
    return ctx.done(None)


def test_a_model_call_that_failed_and_waits_to_be_retried_is_a_failed_chat_span() -> None:
    engine, _ = memory_engine([flaky])
    exporter = InMemorySpanExporter()
    tracing = Tracing(engine.store, exporter, flows=[flaky], recover_window=None)
    engine.metrics = tracing
    engine.start(flaky, None)
    asyncio.run(Runner(engine).run_until_idle())
    tracing.shutdown()
    (chat,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chat.kind.name == "CLIENT"
    assert (chat.attributes or {})["error.type"] == "_OTHER"
    assert chat.status.status_code.name == "ERROR"


class Note(BaseModel):
    text: str


@uw.tool(mutating=False)
async def jot(args: Note) -> dict[str, Any]:
    """Note something down."""
    return {"noted": True}


def test_an_agents_run_is_an_invoke_agent_span() -> None:
    agent = uw.Agent("helper", model=RuleModel(lambda _: say(None, ("finish", {"result": 1}))),
                     tools=[jot], plan=False)
    _, run_id, spans = run([agent.flow], agent.flow, {"goal": "say hi"})
    (root,) = [s for s in spans if hexed(s)[1] == root_span_id(run_id)]
    assert root.name == "invoke_agent helper"
    assert attrs(root, "gen_ai.") == {"gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": "helper"}


def test_the_same_journal_gives_the_same_spans_whole_or_in_parts() -> None:
    engine, run_id, _ = run([payments], payments, trace_context=CALLER)
    records = [(r.seq, r.at, r.event) for r in engine.client.history(run_id)]
    whole = run_spans("default", run_id, records)
    parts = RunSpans("default", run_id)
    fed = [s for i in range(0, len(records), 3) for s in parts.feed(records[i:i + 3])]
    assert fed == whole and len({s.span_id for s in whole}) == len(whole)


ATTEMPT: list[tuple[int, float, ev.RunEvent]] = [
    (1, 9.0, ev.RunStarted(flow="f", input=None, state={}, first_step="a",
                           trace_context=CALLER)),
    (2, 10.0, ev.StepStarted(step="a", attempt=1)),
    (3, 11.0, ev.ToolSucceeded(key="k", tool="x", index=0, args_hash="h", result=None)),
    (4, 15.0, ev.StepStarted(step="a", attempt=2)),
]


def test_an_attempt_cut_short_ends_at_its_last_event_and_is_marked_recovered() -> None:
    spans = run_spans("t", "r", ATTEMPT)
    assert [(s.name, s.span_id, s.parent_id) for s in spans] == [
        ("execute_tool x", span_id("r", 3), span_id("r", 2)),
        ("underway.step a", span_id("r", 2), root_span_id("r")),
    ]
    step = spans[1]
    assert step.attributes["underway.recovered"] is True
    assert (step.start, step.end, step.ended_at_seq) == (10.0, 11.0, 4)


class Down(InMemorySpanExporter):
    """An exporter whose collector is down until told otherwise."""

    up = False

    def export(self, spans: Any) -> SpanExportResult:
        if not self.up:
            return SpanExportResult.FAILURE
        return super().export(spans)


def test_spans_a_collector_refused_are_sent_once_it_is_back() -> None:
    engine, _ = memory_engine([payments])
    exporter = Down()
    tracing = Tracing(engine.store, exporter, flows=[payments], recover_window=None)
    engine.metrics = tracing
    run_id, _ = engine.start(payments, None)
    asyncio.run(Runner(engine).run_until_idle())
    assert tracing.flush() == 0 and engine.store.span_cursor("default", run_id) == 0
    exporter.up = True
    sent = tracing.flush()
    assert sent == len(exporter.get_finished_spans()) > 0
    assert engine.store.span_cursor("default", run_id) == len(engine.client.history(run_id))
    tracing.shutdown()
