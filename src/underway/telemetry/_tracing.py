"""OpenTelemetry traces of the runs an engine drives: one span per activation, with a span
per step attempt, tool call (and its policy decision), model call and approval wait below
it, made from the events each commit made durable, at the times the journal gives them.

Spans carry names, ids, outcomes, tokens and latencies; a call's arguments and result only
where its tool opts in (:attr:`~underway.Tool.trace_args`, :attr:`~underway.Tool.trace_result`),
never a sensitive field, a prompt or a response. A run started with a trace context
(``traceparent`` on ``POST /v1/runs`` or on an intake webhook, ``Client.start(trace_context=
...)``) has it journaled in ``RunStarted``: every activation of the run, in any worker and
however late, joins that trace. With only the OpenTelemetry API installed (no SDK
configured) every span is a no-op.

**A worker may die at any moment**, and a span that has not ended is never exported. So no
span is exported before its parent: an activation's span ends as soon as it begins (it
covers the wait from when the run was due until a worker took it up), and a step attempt's
span and the spans below it are made together when the attempt ends. An attempt cut short
by a crash or a lost lease is made by the activation that takes the run over, from the
journal, with ``underway.recovered`` set: every span a worker exports reaches the caller's
span, and a call journaled before a crash still has its span.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from .. import events as ev
from ..events import JSON
from ..journal.state import RunState
from ..labels import LabelValue
from ..redaction import REDACTED
from ._seam import Metrics

if TYPE_CHECKING:
    from ..effects import Tool

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
class _Child:
    """A span below a step, kept until the step attempt ends."""

    name: str
    start: float
    end: float
    attributes: dict[str, AttributeValue]
    error: str | None = None
    call: tuple[str, ev.ToolSucceeded | None] | None = None
    """A tool call's key and its success (whose result the tool may let us record)."""


@dataclass
class _Attempt:
    """A step attempt: its spans are made when it ends."""

    step: str
    attempt: int
    started: float
    last: float
    recovered: bool = False
    children: list[_Child] = field(default_factory=list)


@dataclass
class _Run:
    ctx: Context
    requested: dict[str, float] = field(default_factory=dict)
    attempt: _Attempt | None = None
    recovered: _Attempt | None = None
    """The attempt an earlier activation left unended, made at this one's first commit."""
    calls: dict[str, tuple[Tool, JSON]] = field(default_factory=dict)
    """Calls of tools that opt in to recording, by key: the tool and its arguments."""
    labels: dict[str, AttributeValue] = field(default_factory=dict)
    """The run's labels as span attributes (``underway.label.<name>``)."""


class Tracing(Metrics):
    """Spans of the runs an engine drives (``Engine(metrics=Tracing())``, or with
    Prometheus metrics, ``Engine(metrics=Fanout(PrometheusMetrics(), Tracing()))``), made
    with ``tracer_provider`` (default: the global one):

    - ``underway.activation {flow}``: a worker took the run up, child of the run's
      journaled trace context when it has one (attributes ``underway.tenant``,
      ``underway.run_id``, ``underway.flow``, ``underway.takeover``); from when the run
      was due to when it was loaded;
    - ``underway.step {step}``: a step attempt (``underway.step``, ``underway.attempt``;
      ``underway.recovered`` when made from the journal after its worker died);
    - on both, the run's labels as they stand (``underway.label.<name>``; a sensitive
      one ``[redacted]``);
    - ``underway.tool {tool}`` (``underway.tool``, ``underway.outcome``; an error status
      when the call failed; ``underway.tool.args.*`` and ``underway.tool.result.*`` as
      the tool opts in); ``underway.policy {tool}`` (``underway.policy.decision``,
      ``underway.policy.rule_id``);
    - ``chat {model}`` (GenAI conventions: ``gen_ai.operation.name``, ``gen_ai.system``,
      ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``,
      ``gen_ai.usage.output_tokens``; and ``underway.cost_usd``);
    - ``underway.approval_wait``: from the request to the decision (or expiry), when the
      decision is read (``underway.approval.outcome``).
    """

    enabled = True

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("underway", tracer_provider=tracer_provider)
        """The tracer spans are made with."""
        self._runs: dict[tuple[str, str], _Run] = {}
        self._lock = threading.Lock()

    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        """Make the activation's span in the run's trace.

        The span ends at once: see the module's docstring.

        Args:
            state: The run loaded.
            wake_latency: Seconds from when it was due to now; the span starts then.
            takeover: True when the run was taken over.
        """
        parent = _PROPAGATOR.extract(state.trace_context) if state.trace_context else None
        now = time.time_ns()
        began = now - _ns(wake_latency) if wake_latency is not None and wake_latency > 0 \
            else now
        lineage = state.lineage
        labels = label_attributes(lineage.labels, lineage.sensitive_labels)
        span = self.tracer.start_span(
            f"underway.activation {state.flow}", context=parent, kind=SpanKind.CONSUMER,
            start_time=began,
            attributes={"underway.tenant": state.tenant_id, "underway.run_id": state.run_id,
                        "underway.flow": state.flow, "underway.takeover": takeover,
                        **labels})
        span.end(end_time=now)
        run = _Run(trace.set_span_in_context(span), labels=labels)
        if state.pending_approval is not None and state.approval_requested_at is not None:
            run.requested[state.pending_approval.request_id] = state.approval_requested_at
        with self._lock:
            self._runs[(state.tenant_id, state.run_id)] = run

    def interrupted(self, tenant_id: str, run_id: str, flow: str,
                    events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Keep the unended attempt to make at this activation's first commit.

        An activation that commits nothing leaves it to the next.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The unended attempt's events ``(seq, at, event)``.
        """
        run = self._run(tenant_id, run_id)
        if run is None:
            return
        for _, at, e in events:
            self._event(run, at, e)
        run.recovered, run.attempt = run.attempt, None
        if run.recovered is not None:
            run.recovered.recovered = True

    def calling(self, tenant_id: str, run_id: str, key: str, tool: Tool,
                args: JSON) -> None:
        """Keep the arguments of a call whose tool lets some of them be recorded.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            key: The call's idempotency key.
            tool: The tool called.
            args: The call's arguments.
        """
        run = self._run(tenant_id, run_id)
        if run is not None:
            run.calls[key] = (tool, args)

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Make the spans the committed events complete.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The committed events ``(seq, at, event)``.
        """
        run = self._run(tenant_id, run_id)
        if run is None:
            return
        if run.recovered is not None:
            self._flush(run, run.recovered)
            run.recovered = None
        for _, at, e in events:
            self._event(run, at, e)

    def abandoned(self, tenant_id: str, run_id: str) -> None:
        """Drop the attempt in progress: the activation that takes the run over makes it."""
        run = self._run(tenant_id, run_id)
        if run is not None:
            run.attempt = run.recovered = None

    def left(self, tenant_id: str, run_id: str) -> None:
        """Make the attempt the run was handed back in (it waits, escalated or stopped)."""
        with self._lock:
            run = self._runs.pop((tenant_id, run_id), None)
        if run is not None and run.attempt is not None:
            self._flush(run, run.attempt)

    def _run(self, tenant_id: str, run_id: str) -> _Run | None:
        with self._lock:
            return self._runs.get((tenant_id, run_id))

    def _event(self, run: _Run, at: float, e: ev.RunEvent) -> None:
        attempt = run.attempt
        if isinstance(e, ev.StepStarted):
            if attempt is not None:
                self._flush(run, attempt)
            run.attempt = _Attempt(e.step, e.attempt, at, at)
            return
        if attempt is not None:
            attempt.last = max(attempt.last, at)
        if isinstance(e, ev.StepCompleted):
            if attempt is not None:
                self._flush(run, attempt)
            run.attempt = None
        elif isinstance(e, ev.RunLabeled):
            run.labels.update(label_attributes(e.labels, e.sensitive_fields or ()))
        elif isinstance(e, _TOOL_ENDS):
            latency = getattr(e, "latency_ms", 0.0) / 1000.0
            outcome = type(e).__name__.removeprefix("Tool")
            self._child(run, _Child(
                f"underway.tool {e.tool}", at - latency, at,
                {"underway.tool": e.tool, "underway.outcome": outcome,
                 "underway.call_index": e.index},
                None if isinstance(e, ev.ToolSucceeded) else outcome,
                (e.key, e if isinstance(e, ev.ToolSucceeded) else None)))
        elif isinstance(e, ev.PolicyDecided):
            self._child(run, _Child(
                f"underway.policy {e.tool}", at, at,
                {"underway.tool": e.tool, "underway.policy.decision": e.decision,
                 "underway.policy.rule_id": e.rule_id or "",
                 "underway.policy.version": e.policy_version}))
        elif isinstance(e, ev.ModelResponded):
            self._child(run, _Child(f"chat {e.model}", at - e.latency_ms / 1000.0, at, {
                "gen_ai.operation.name": "chat", "gen_ai.system": gen_ai_system(e.model),
                "gen_ai.request.model": e.model, "gen_ai.response.model": e.model,
                "gen_ai.usage.input_tokens": e.tokens_in,
                "gen_ai.usage.output_tokens": e.tokens_out, "underway.cost_usd": e.cost_usd,
            }))
        elif isinstance(e, ev.ApprovalRequested):
            run.requested[e.request_id] = at
        elif isinstance(e, _DECISIONS):
            began = run.requested.pop(e.request_id, None)
            if began is not None:
                outcome = type(e).__name__.removeprefix("Approval").lower()
                self._child(run, _Child("underway.approval_wait", began, at, {
                    "underway.approval.request_id": e.request_id,
                    "underway.approval.outcome": outcome}))

    def _child(self, run: _Run, child: _Child) -> None:
        if run.attempt is not None:
            run.attempt.children.append(child)
        else:
            self._make(run, child, run.ctx)

    def _flush(self, run: _Run, attempt: _Attempt) -> None:
        """Make an ended attempt's span, then the spans below it: a parent is exported
        before its children, so a worker killed in between leaves no orphan."""
        attributes: dict[str, AttributeValue] = {
            "underway.step": attempt.step, "underway.attempt": attempt.attempt, **run.labels}
        if attempt.recovered:
            attributes["underway.recovered"] = True
        span = self.tracer.start_span(f"underway.step {attempt.step}", context=run.ctx,
                                      start_time=_ns(attempt.started), attributes=attributes)
        span.end(end_time=_ns(attempt.last))
        ctx = trace.set_span_in_context(span)
        for child in attempt.children:
            self._make(run, child, ctx)
        attempt.children = []

    def _make(self, run: _Run, child: _Child, parent: Context) -> None:
        attributes = child.attributes
        if child.call is not None and child.call[0] in run.calls:
            tool, args = run.calls[child.call[0]]
            done = child.call[1]
            attributes = {
                **attributes,
                **recorded("underway.tool.args", args, tool.trace_args, tool.never_traced),
                **(recorded("underway.tool.result", done.result, tool.trace_result,
                            tool.never_traced) if done is not None else {}),
            }
        span = self.tracer.start_span(child.name, context=parent,
                                      start_time=_ns(child.start), attributes=attributes)
        if child.error is not None:
            span.set_status(Status(StatusCode.ERROR, child.error))
        span.end(end_time=_ns(child.end))


def label_attributes(labels: Mapping[str, LabelValue], sensitive: Iterable[str]
                     ) -> dict[str, AttributeValue]:
    """A run's labels as span attributes, ``underway.label.<name>``, typed; a sensitive
    one's value is ``[redacted]``.

    Args:
        labels: The labels.
        sensitive: The names of those that are sensitive.
    """
    hidden = set(sensitive)
    return {f"underway.label.{k}": REDACTED if k in hidden else v for k, v in labels.items()}


def recorded(prefix: str, value: JSON, chosen: bool | tuple[str, ...],
             hidden: frozenset[str]) -> dict[str, AttributeValue]:
    """The span attributes recording ``value`` (a call's arguments or result): every
    field when ``chosen`` is True, else the fields at the dotted paths ``chosen`` names;
    never a field named in ``hidden``, at any depth. A scalar is recorded as it is, a
    list or null as JSON; an object is one attribute per field (``prefix.field``)."""
    out: dict[str, AttributeValue] = {}
    if chosen is True:
        _flatten(prefix, value, hidden, out)
    elif chosen:
        for path in chosen:
            found: Any = value
            for part in path.split("."):
                if not isinstance(found, dict) or part not in found:
                    break
                found = found[part]
            else:
                _flatten(f"{prefix}.{path}", found, hidden, out)
    return out


def _flatten(name: str, value: JSON, hidden: frozenset[str],
             out: dict[str, AttributeValue]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in hidden:
                _flatten(f"{name}.{k}", v, hidden, out)
    elif isinstance(value, str | bool | int | float):
        out[name] = value
    else:
        out[name] = json.dumps(_scrub(value, hidden), sort_keys=True, separators=(",", ":"))


def _scrub(value: JSON, hidden: frozenset[str]) -> JSON:
    if isinstance(value, dict):
        return {k: _scrub(v, hidden) for k, v in value.items() if k not in hidden}
    if isinstance(value, list):
        return [_scrub(v, hidden) for v in value]
    return value
