"""A run's spans, derived from its journal alone: the same events give the same spans,
with the same ids, in any process and at any time.

Every span's id is derived from the run and the seq of the event that began it, and its
parent's id is known as soon as the parent began: a span can be exported the moment the
event that ends it is journaled, before its parent ends. A crash loses no span, since a
later worker derives the same spans from the same journal (:mod:`._journal_export`).

The spans of a run (OpenTelemetry GenAI conventions where they apply):

- the run's root span, ``invoke_agent {flow}`` for an agent's run, ``underway.run {flow}``
  otherwise: from its start to its end, below the caller's span when the run was started
  with a trace context; a run started, forked or replayed by another sits below that
  run's root span (:func:`underway.lineage.below`);
- ``underway.step {step}`` per step attempt, below the root;
- ``execute_tool {tool}``, ``underway.policy {tool}``, ``chat {model}`` and
  ``underway.approval_wait``, below the step attempt they happened in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .. import events as ev
from ..events import JSON
from ..labels import LabelValue
from ..lineage import minted_context, root_span_id, trace_parent
from ..redaction import REDACTED

if TYPE_CHECKING:
    from ..effects import Tool

Attribute = str | bool | int | float
"""A span attribute's value."""

_TOOL_ENDS = (ev.ToolSucceeded, ev.ToolFailed, ev.ToolTimedOut, ev.ToolOutcomeUnknown)
_DECISIONS = (ev.ApprovalGranted, ev.ApprovalRejected, ev.ApprovalExpired)
_ENDS = (ev.RunCompleted, ev.RunFailed, ev.RunCancelled, ev.RunDeadLettered)
_INBOUND = (ev.SignalReceived, ev.SignalIgnored, ev.TimerFired, ev.ChildFinished,
            *_DECISIONS, ev.EscalationResolved, ev.EscalationAnswered, ev.EscalationExpired,
            ev.RunResumed, ev.RunForked)
"""Events that reach a waiting run from outside: they do not extend a step attempt."""


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span of a run, as derived from its journal."""

    name: str
    trace_id: str
    """32 hex digits."""
    span_id: str
    """16 hex digits, derived from the run and the seq of the event that began it."""
    parent_id: str | None
    kind: Literal["internal", "client"]
    start: float
    end: float
    attributes: dict[str, Attribute]
    error: str | None
    """The ``error.type`` of a span that failed; None when it did not."""
    ended_at_seq: int
    """The seq of the event that ended it: it is exported once the journal holds that."""


def span_id(run_id: str, seq: int) -> str:
    """The id of the span that run ``run_id``'s event ``seq`` began.

    Args:
        run_id: The run.
        seq: The event that began the span.
    """
    found = hashlib.sha256(f"underway.span\x00{run_id}\x00{seq}".encode()).hexdigest()[:16]
    return found if set(found) != {"0"} else "2" * 16


@dataclass
class _Attempt:
    span_id: str
    step: str
    attempt: int
    started: float
    last: float


@dataclass
class _Deriving:
    tenant_id: str
    run_id: str
    trace_id: str = ""
    root_parent: str | None = None
    root_name: str = ""
    flow: str = ""
    started: float = 0.0
    attempt: _Attempt | None = None
    requested: dict[str, tuple[float, int]] = field(default_factory=dict)
    args: dict[str, JSON] = field(default_factory=dict)
    out: list[SpanRecord] = field(default_factory=list)
    seq: int = 0
    ended: bool = False
    calls: Callable[[str], JSON | None] = lambda _: None
    labels: dict[str, Attribute] = field(default_factory=dict)
    """The run's labels as they stand, as span attributes (``underway.label.<name>``)."""
    hidden: set[str] = field(default_factory=set)
    """The names of its sensitive labels, whose values spans never carry."""


class RunSpans:
    """The spans of one run's journal, derived as its events are fed in order: feeding a
    journal in parts gives the spans feeding it whole gives.

    Args:
        tenant_id: The run's tenant.
        run_id: The run.
        tool: The tool of a name, whose opt-ins say which argument and result fields a
            span records (None: none).
        agent: Whether a flow is an agent's.
        calls: The arguments of a read-only call by key, as this process saw them (the
            journal keeps only a mutating call's).
    """

    def __init__(self, tenant_id: str, run_id: str, *,
                 tool: Callable[[str], Tool | None] = lambda _: None,
                 agent: Callable[[str], bool] = lambda _: False,
                 calls: Callable[[str], JSON | None] = lambda _: None) -> None:
        self._d = _Deriving(tenant_id, run_id, calls=calls)
        self._tool = tool
        self._agent = agent

    @property
    def seq(self) -> int:
        """The last event fed (0: none)."""
        return self._d.seq

    @property
    def ended(self) -> bool:
        """Whether the run's end was fed (its root span is made)."""
        return self._d.ended

    def feed(self, records: Iterable[tuple[int, float, ev.RunEvent]]) -> list[SpanRecord]:
        """The spans the events ``records`` (the ones after :attr:`seq`, in order) end.

        Args:
            records: Events ``(seq, at, event)``; those at or before :attr:`seq` are
                skipped.
        """
        d = self._d
        for seq, at, e in records:
            if seq <= d.seq:
                continue
            if d.seq == 0 and not isinstance(e, ev.RunStarted):
                raise ValueError(f"run {d.run_id}: its journal does not begin with its start")
            d.seq = seq
            _event(d, seq, at, e, self._tool, self._agent)
        out, d.out = d.out, []
        return out


def run_spans(
    tenant_id: str, run_id: str, records: Iterable[tuple[int, float, ev.RunEvent]], *,
    tool: Callable[[str], Tool | None] = lambda _: None,
    agent: Callable[[str], bool] = lambda _: False,
) -> list[SpanRecord]:
    """Every span the journal ``records`` has ended, in the order they ended.

    Args:
        tenant_id: The run's tenant.
        run_id: The run.
        records: Its events ``(seq, at, event)`` from its first, in order.
        tool: The tool of a name, whose opt-ins say which argument and result fields a
            span records (None: none).
        agent: Whether a flow is an agent's.
    """
    return RunSpans(tenant_id, run_id, tool=tool, agent=agent).feed(records)


def _event(d: _Deriving, seq: int, at: float, e: ev.RunEvent,
           tool: Callable[[str], Tool | None], agent: Callable[[str], bool]) -> None:
    if isinstance(e, ev.RunStarted):
        _started(d, at, e, agent)
        return
    attempt = d.attempt
    if isinstance(e, ev.StepStarted):
        if attempt is not None:
            # Begun again after a crash or a lost lease, or resumed after a wait.
            retried = e.step == attempt.step and e.attempt > attempt.attempt
            _end_attempt(d, seq, attempt.last, recovered=retried)
        d.attempt = _Attempt(span_id(d.run_id, seq), e.step, e.attempt, at, at)
        return
    if attempt is not None and not isinstance(e, _INBOUND):
        attempt.last = max(attempt.last, at)
    if isinstance(e, ev.StepCompleted):
        if attempt is not None:
            _end_attempt(d, seq, at)
    elif isinstance(e, _TOOL_ENDS):
        _tool_span(d, seq, at, e, tool(e.tool))
    elif isinstance(e, ev.PolicyDecided):
        _child(d, seq, f"underway.policy {e.tool}", at, at, {
            "underway.tool": e.tool, "underway.policy.decision": e.decision,
            "underway.policy.rule_id": e.rule_id or "",
            "underway.policy.version": e.policy_version})
    elif isinstance(e, ev.ToolStarted):
        d.args[e.key] = e.args
    elif isinstance(e, ev.ModelResponded):
        _chat_span(d, seq, at, e)
    elif isinstance(e, ev.RetryScheduled) and e.tool == "model":
        # A model call that failed and waits to be asked again: the journal keeps no more.
        _child(d, seq, "chat", at, at, {
            "gen_ai.operation.name": "chat", "underway.retry.attempt": e.attempt},
            error="_OTHER", kind="client")
    elif isinstance(e, ev.RunLabeled):
        _labeled(d, e.labels, e.sensitive_fields or ())
    elif isinstance(e, ev.ApprovalRequested):
        d.requested[e.request_id] = (at, seq)
    elif isinstance(e, _DECISIONS):
        began = d.requested.pop(e.request_id, None)
        if began is not None:
            outcome = type(e).__name__.removeprefix("Approval").lower()
            _child(d, began[1], "underway.approval_wait", began[0], at, {
                "underway.approval.request_id": e.request_id,
                "underway.approval.outcome": outcome}, ended=seq)
    elif isinstance(e, _ENDS):
        if attempt is not None:
            _end_attempt(d, seq, attempt.last)
        _end_root(d, seq, at, e)


def _started(d: _Deriving, at: float, e: ev.RunStarted, agent: Callable[[str], bool]) -> None:
    found = trace_parent(e.trace_context) or trace_parent(minted_context(d.tenant_id, d.run_id))
    assert found is not None
    root = root_span_id(d.run_id)
    d.trace_id, d.root_parent = found[0], None if found[1] == root else found[1]
    d.flow, d.started = e.flow, at
    d.root_name = f"invoke_agent {e.flow}" if agent(e.flow) else f"underway.run {e.flow}"
    if e.lineage is not None:
        _labeled(d, e.lineage.labels, e.lineage.sensitive_labels)


def _labeled(d: _Deriving, labels: Mapping[str, LabelValue], sensitive: Iterable[str]
             ) -> None:
    """Labels set over the run's: a sensitive one stays sensitive, its value never shown."""
    d.hidden.update(sensitive)
    for k, v in labels.items():
        d.labels[f"underway.label.{k}"] = REDACTED if k in d.hidden else v


def _end_root(d: _Deriving, seq: int, at: float, e: ev.RunEvent) -> None:
    status = type(e).__name__.removeprefix("Run").lower()
    attributes: dict[str, Attribute] = {
        "underway.tenant": d.tenant_id, "underway.run_id": d.run_id, "underway.flow": d.flow,
        "underway.status": status, **d.labels}
    if d.root_name.startswith("invoke_agent"):
        attributes |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": d.flow}
    error = None
    if isinstance(e, ev.RunFailed | ev.RunDeadLettered):
        error = status
        attributes["error.type"] = status
    d.out.append(SpanRecord(d.root_name, d.trace_id, root_span_id(d.run_id), d.root_parent,
                            "internal", d.started, at, attributes, error, seq))
    d.ended = True


def _end_attempt(d: _Deriving, seq: int, end: float, *, recovered: bool = False) -> None:
    a = d.attempt
    assert a is not None
    attributes: dict[str, Attribute] = {
        "underway.step": a.step, "underway.attempt": a.attempt, "underway.run_id": d.run_id,
        **d.labels}
    if recovered:
        attributes["underway.recovered"] = True
    d.out.append(SpanRecord(f"underway.step {a.step}", d.trace_id, a.span_id,
                            root_span_id(d.run_id), "internal", a.started, end, attributes,
                            None, seq))
    d.attempt = None


def _child(d: _Deriving, seq: int, name: str, start: float, end: float,
           attributes: dict[str, Attribute], *, error: str | None = None,
           kind: Literal["internal", "client"] = "internal", ended: int | None = None) -> None:
    parent = d.attempt.span_id if d.attempt is not None else root_span_id(d.run_id)
    if error is not None:
        attributes["error.type"] = error
    d.out.append(SpanRecord(name, d.trace_id, span_id(d.run_id, seq), parent, kind, start,
                            end, attributes, error, seq if ended is None else ended))


def _tool_span(d: _Deriving, seq: int, at: float, e: Any, code: Tool | None) -> None:
    latency = getattr(e, "latency_ms", 0.0) / 1000.0
    outcome = type(e).__name__.removeprefix("Tool")
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": e.tool,
        "gen_ai.tool.call.id": e.key, "gen_ai.tool.type": "function",
        "underway.outcome": outcome, "underway.call_index": e.index}
    if code is not None:
        args = d.args.pop(e.key, None)
        if args is None:
            args = d.calls(e.key)
        if args is not None:
            attributes |= recorded("underway.tool.args", args, code.trace_args,
                                   code.never_traced)
        if isinstance(e, ev.ToolSucceeded):
            attributes |= recorded("underway.tool.result", e.result, code.trace_result,
                                   code.never_traced)
    error = None if isinstance(e, ev.ToolSucceeded) else str(
        getattr(e, "error_type", None) or {"TimedOut": "timeout"}.get(outcome, outcome))
    _child(d, seq, f"execute_tool {e.tool}", at - latency, at, attributes, error=error)


def _chat_span(d: _Deriving, seq: int, at: float, e: ev.ModelResponded) -> None:
    """A model call's span. An adapter's response (as journaled) tells the model that
    answered and the tokens read from the prompt cache."""
    response = e.response if isinstance(e.response, dict) else {}
    request = e.request if isinstance(e.request, dict) else {}
    asked = request.get("model") if isinstance(request.get("model"), str) else e.model
    answered = response.get("model") if isinstance(response.get("model"), str) else e.model
    cached = response.get("cached_tokens_in")
    attributes: dict[str, Attribute] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": gen_ai_provider(str(asked)),
        "gen_ai.request.model": str(asked), "gen_ai.response.model": str(answered),
        "gen_ai.usage.input_tokens": e.tokens_in, "gen_ai.usage.output_tokens": e.tokens_out,
        "underway.cost_usd": e.cost_usd}
    if isinstance(cached, int) and not isinstance(cached, bool):
        attributes["gen_ai.usage.cache_read.input_tokens"] = cached
    _child(d, seq, f"chat {asked}", at - e.latency_ms / 1000.0, at, attributes, kind="client")


def gen_ai_provider(model: str) -> str:
    """The ``gen_ai.provider.name`` of a model id, as far as its name tells (``_OTHER``
    when it does not).

    Args:
        model: The model's id.
    """
    m = model.lower()
    for prefix, provider in (("gpt", "openai"), ("o1", "openai"), ("o3", "openai"),
                             ("o4", "openai"), ("text-embedding", "openai"),
                             ("claude", "anthropic"), ("gemini", "gcp.gemini"),
                             ("mistral", "mistral_ai"), ("command", "cohere")):
        if m.startswith(prefix):
            return provider
    return "_OTHER"


def recorded(prefix: str, value: JSON, chosen: bool | tuple[str, ...],
             hidden: frozenset[str]) -> dict[str, Attribute]:
    """The span attributes recording ``value`` (a call's arguments or result).

    Every field is recorded when ``chosen`` is True; else the fields at the dotted paths
    ``chosen`` names. A field named in ``hidden`` is never recorded, at any depth. A
    scalar is recorded as it is, a list or null as JSON, an object as one attribute per
    field (``prefix.field``).

    Args:
        prefix: The attributes' common name.
        value: The arguments or result.
        chosen: True, or the dotted paths of the fields to record.
        hidden: Field names never recorded.
    """
    out: dict[str, Attribute] = {}
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
             out: dict[str, Attribute]) -> None:
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


def tools_of(flows: Iterable[Any]) -> Mapping[str, Tool]:
    """The tools ``flows`` declare, by name.

    Args:
        flows: Flows (or agents' flows).
    """
    out: dict[str, Tool] = {}
    for flow in flows:
        for t in getattr(flow, "declared_tools", ()):
            out.setdefault(t.name, t)
    return out
