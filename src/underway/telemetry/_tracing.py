"""OpenTelemetry traces of the runs an engine drives: one span per activation, with a span
per step, tool call (and its policy decision), model call and approval wait below it,
made from the events each commit made durable, at the times the journal gives them.

Spans carry names, ids, outcomes, tokens and latencies, never a call's arguments or result,
a prompt or a response. A run started with a trace context (``traceparent`` on ``POST
/v1/runs``, ``Client.start(trace_context=...)``) has it journaled in ``RunStarted``: every
activation of the run, in any worker and however late, joins that trace. With only the
OpenTelemetry API installed (no SDK configured) every span is a no-op."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import events as ev
from ..state import RunState
from ._seam import Metrics

_PROPAGATOR = TraceContextTextMapPropagator()
_TOOL_ENDS = (ev.ToolSucceeded, ev.ToolFailed, ev.ToolTimedOut, ev.ToolOutcomeUnknown)
_DECISIONS = (ev.ApprovalGranted, ev.ApprovalRejected, ev.ApprovalExpired)


def _ns(at: float) -> int:
    return int(at * 1e9)


def gen_ai_system(model: str) -> str:
    """The ``gen_ai.system`` of a model id, as far as its name tells (``_OTHER`` when it
    does not)."""
    m = model.lower()
    for prefix, system in (("gpt", "openai"), ("o1", "openai"), ("o3", "openai"),
                           ("o4", "openai"), ("text-embedding", "openai"),
                           ("claude", "anthropic"), ("gemini", "gcp.gemini"),
                           ("mistral", "mistral_ai"), ("command", "cohere")):
        if m.startswith(prefix):
            return system
    return "_OTHER"


@dataclass
class _Run:
    span: Span
    ctx: Context
    requested: dict[str, float] = field(default_factory=dict)
    step: Span | None = None
    step_ctx: Context | None = None


class Tracing(Metrics):
    """Spans of the runs an engine drives (``Engine(metrics=Tracing())``, or with
    Prometheus metrics, ``Engine(metrics=Fanout(PrometheusMetrics(), Tracing()))``), made
    with ``tracer_provider`` (default: the global one):

    - ``underway.activation {flow}``: a leased run advanced, child of the run's journaled
      trace context when it has one (attributes ``underway.tenant``, ``underway.run_id``,
      ``underway.flow``, ``underway.takeover``);
    - ``underway.step {step}`` (``underway.step``, ``underway.attempt``);
    - ``underway.tool {tool}`` (``underway.tool``, ``underway.outcome``; an error status
      when the call failed); ``underway.policy {tool}`` (``underway.policy.decision``,
      ``underway.policy.rule_id``);
    - ``chat {model}`` (GenAI conventions: ``gen_ai.operation.name``, ``gen_ai.system``,
      ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
      ``gen_ai.usage.output_tokens``; and ``underway.cost_usd``);
    - ``underway.approval_wait {tool}``: from the request to the decision (or expiry),
      when the decision is read (``underway.approval.outcome``).
    """

    enabled = True

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("underway", tracer_provider=tracer_provider)
        """The tracer spans are made with."""
        self._runs: dict[tuple[str, str], _Run] = {}
        self._lock = threading.Lock()

    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        """Open the activation's span in the run's trace."""
        parent = _PROPAGATOR.extract(state.trace_context) if state.trace_context else None
        span = self.tracer.start_span(
            f"underway.activation {state.flow}", context=parent, kind=SpanKind.CONSUMER,
            attributes={"underway.tenant": state.tenant_id, "underway.run_id": state.run_id,
                        "underway.flow": state.flow, "underway.takeover": takeover})
        run = _Run(span, trace.set_span_in_context(span))
        if state.pending_approval is not None and state.approval_requested_at is not None:
            run.requested[state.pending_approval.request_id] = state.approval_requested_at
        with self._lock:
            old = self._runs.pop((state.tenant_id, state.run_id), None)
            self._runs[(state.tenant_id, state.run_id)] = run
        if old is not None:
            _close(old)

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Make the spans the committed events describe."""
        with self._lock:
            run = self._runs.get((tenant_id, run_id))
        if run is None:
            return
        for _, at, e in events:
            self._event(run, at, e)

    def left(self, tenant_id: str, run_id: str) -> None:
        """End the activation's span (and a step left open)."""
        with self._lock:
            run = self._runs.pop((tenant_id, run_id), None)
        if run is not None:
            _close(run)

    def _span(self, run: _Run, name: str, start: float, end: float,
              attributes: dict[str, Any], error: str | None = None) -> None:
        span = self.tracer.start_span(name, context=run.step_ctx or run.ctx,
                                      start_time=_ns(start), attributes=attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=_ns(end))

    def _event(self, run: _Run, at: float, e: ev.RunEvent) -> None:
        if isinstance(e, ev.StepStarted):
            if run.step is not None:
                run.step.end(end_time=_ns(at))
            run.step = self.tracer.start_span(
                f"underway.step {e.step}", context=run.ctx, start_time=_ns(at),
                attributes={"underway.step": e.step, "underway.attempt": e.attempt})
            run.step_ctx = trace.set_span_in_context(run.step)
        elif isinstance(e, ev.StepCompleted):
            if run.step is not None:
                run.step.end(end_time=_ns(at))
            run.step, run.step_ctx = None, None
        elif isinstance(e, _TOOL_ENDS):
            latency = getattr(e, "latency_ms", 0.0) / 1000.0
            outcome = type(e).__name__.removeprefix("Tool")
            self._span(run, f"underway.tool {e.tool}", at - latency, at,
                       {"underway.tool": e.tool, "underway.outcome": outcome,
                        "underway.call_index": e.index},
                       None if isinstance(e, ev.ToolSucceeded) else outcome)
        elif isinstance(e, ev.PolicyDecided):
            self._span(run, f"underway.policy {e.tool}", at, at,
                       {"underway.tool": e.tool, "underway.policy.decision": e.decision,
                        "underway.policy.rule_id": e.rule_id or "",
                        "underway.policy.version": e.policy_version})
        elif isinstance(e, ev.ModelResponded):
            self._span(run, f"chat {e.model}", at - e.latency_ms / 1000.0, at, {
                "gen_ai.operation.name": "chat", "gen_ai.system": gen_ai_system(e.model),
                "gen_ai.request.model": e.model, "gen_ai.response.model": e.model,
                "gen_ai.usage.input_tokens": e.tokens_in,
                "gen_ai.usage.output_tokens": e.tokens_out, "underway.cost_usd": e.cost_usd,
            })
        elif isinstance(e, ev.ApprovalRequested):
            run.requested[e.request_id] = at
        elif isinstance(e, _DECISIONS):
            began = run.requested.pop(e.request_id, None)
            if began is not None:
                outcome = type(e).__name__.removeprefix("Approval").lower()
                self._span(run, "underway.approval_wait", began, at,
                           {"underway.approval.request_id": e.request_id,
                            "underway.approval.outcome": outcome})


def _close(run: _Run) -> None:
    if run.step is not None:
        run.step.end()
    run.span.end()
