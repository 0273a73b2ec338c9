"""Prometheus metrics: :class:`PrometheusMetrics`, what a worker's engine counts as it
drives runs; :class:`DatabaseCollector`, what the database says, read on each scrape;
:func:`serve_metrics`, a registry served over HTTP (``underway worker --metrics-port``)."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Iterator, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .. import events as ev
from .._extras import needs_extra
from ..client import Client
from ..journal.state import RunState
from ..store.base import Store
from ._seam import Metrics

with needs_extra("prometheus", "Prometheus metrics (underway.telemetry)"):
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Histogram,
        make_wsgi_app,
        start_http_server,
    )
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0, 300.0, float("inf"))
"""Seconds: the buckets of every latency histogram."""

_ENDS: dict[type[Any], str] = {ev.RunCompleted: "completed", ev.RunFailed: "failed",
                               ev.RunCancelled: "cancelled", ev.RunDeadLettered: "dead"}
_TOOL_OUTCOMES: dict[type[Any], str] = {
    ev.ToolSucceeded: "succeeded", ev.ToolFailed: "failed", ev.ToolTimedOut: "timed_out",
    ev.ToolOutcomeUnknown: "unknown", ev.ToolRefused: "refused",
}


class PrometheusMetrics(Metrics):
    """The engine's metrics in a Prometheus registry of their own (``registry``; a new one
    unless given). Counted from the events a commit made durable, so a step replayed after
    a crash is not counted twice:

    - ``underway_steps_total{flow,step}``, ``underway_step_duration_seconds{flow,step}``
      (from ``StepStarted`` to ``StepCompleted``, when both were journaled by this process);
    - ``underway_tool_calls_total{tool,outcome}``, ``underway_tool_duration_seconds{tool}``;
    - ``underway_model_calls_total{model}``, ``underway_model_tokens_total{model,direction}``
      (``input``/``output``), ``underway_model_cost_usd_total{model}``,
      ``underway_model_duration_seconds{model}``;
    - ``underway_runs_ended_total{flow,status}`` and ``underway_dead_runs_total{flow}``;
    - ``underway_approvals_requested_total{tool}``,
      ``underway_escalations_total{flow,cause}``;
    - ``underway_activations_total{flow}``, ``underway_wakeup_latency_seconds`` (due time to
      activation) and ``underway_lease_takeovers_total{flow}``.
    """

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        """Where the metrics are registered."""
        r, b = self.registry, LATENCY_BUCKETS
        self.steps = Counter("underway_steps", "Steps completed.", ["flow", "step"], registry=r)
        self.step_seconds = Histogram("underway_step_duration_seconds", "Step latency.",
                                      ["flow", "step"], buckets=b, registry=r)
        self.tool_calls = Counter("underway_tool_calls", "Tool call outcomes.",
                                  ["tool", "outcome"], registry=r)
        self.tool_seconds = Histogram("underway_tool_duration_seconds", "Tool call latency.",
                                      ["tool"], buckets=b, registry=r)
        self.model_calls = Counter("underway_model_calls", "Model calls.", ["model"],
                                   registry=r)
        self.model_tokens = Counter("underway_model_tokens", "Model tokens.",
                                    ["model", "direction"], registry=r)
        self.model_cost = Counter("underway_model_cost_usd", "Model cost in USD.", ["model"],
                                  registry=r)
        self.model_seconds = Histogram("underway_model_duration_seconds",
                                       "Model call latency.", ["model"], buckets=b,
                                       registry=r)
        self.runs_ended = Counter("underway_runs_ended", "Runs that ended, by status.",
                                  ["flow", "status"], registry=r)
        self.dead_runs = Counter("underway_dead_runs", "Runs dead-lettered.", ["flow"],
                                 registry=r)
        self.escalations = Counter("underway_escalations", "Runs escalated to a person.",
                                   ["flow", "cause"], registry=r)
        self.approvals = Counter("underway_approvals_requested", "Approvals requested.",
                                 ["tool"], registry=r)
        self.activations = Counter("underway_activations", "Leased runs activated.",
                                   ["flow"], registry=r)
        self.wakeup_seconds = Histogram("underway_wakeup_latency_seconds",
                                        "From a run's due time to its activation.",
                                        buckets=b, registry=r)
        self.takeovers = Counter("underway_lease_takeovers",
                                 "Runs activated in the middle of a step another worker "
                                 "started.", ["flow"], registry=r)
        self._started: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        """Count an activation, its wake-up latency and whether it took a run over.

        Args:
            state: The run loaded.
            wake_latency: Seconds from when it was due to now.
            takeover: True when the run was taken over.
        """
        flow = state.flow
        self.activations.labels(flow).inc()
        if wake_latency is not None:
            self.wakeup_seconds.observe(max(0.0, wake_latency))
        if takeover:
            self.takeovers.labels(flow).inc()

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Count what the committed events say.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The committed events ``(seq, at, event)``.
        """
        key = (tenant_id, run_id)
        for _, at, e in events:
            if isinstance(e, ev.StepStarted):
                with self._lock:
                    self._started[key] = at
            elif isinstance(e, ev.StepCompleted):
                self.steps.labels(flow, e.step).inc()
                with self._lock:
                    began = self._started.pop(key, None)
                if began is not None:
                    self.step_seconds.labels(flow, e.step).observe(max(0.0, at - began))
            elif type(e) in _TOOL_OUTCOMES:
                tool = str(getattr(e, "tool", ""))
                self.tool_calls.labels(tool, _TOOL_OUTCOMES[type(e)]).inc()
                if isinstance(e, ev.ToolSucceeded | ev.ToolFailed):
                    self.tool_seconds.labels(tool).observe(e.latency_ms / 1000.0)
            elif isinstance(e, ev.ModelResponded):
                self.model_calls.labels(e.model).inc()
                self.model_tokens.labels(e.model, "input").inc(e.tokens_in)
                self.model_tokens.labels(e.model, "output").inc(e.tokens_out)
                self.model_cost.labels(e.model).inc(e.cost_usd)
                self.model_seconds.labels(e.model).observe(e.latency_ms / 1000.0)
            elif isinstance(e, ev.Escalated):
                self.escalations.labels(flow, e.cause).inc()
            elif isinstance(e, ev.ApprovalRequested):
                self.approvals.labels(e.tool).inc()
            elif type(e) in _ENDS:
                self.runs_ended.labels(flow, _ENDS[type(e)]).inc()
                if isinstance(e, ev.RunDeadLettered):
                    self.dead_runs.labels(flow).inc()
                with self._lock:
                    self._started.pop(key, None)


class DatabaseCollector(Collector):
    """What the database says, read on each scrape (call :meth:`collect` off an event
    loop: it queries the store): ``underway_runs{tenant,status}`` (runs by status),
    ``underway_dead_runs{tenant}``, and ``underway_pending_requests{tenant,kind}`` (waiting
    and escalated runs that wait for a person: ``approval``, ``question``, ``resolution``).

    A scrape sums the counts the database keeps with each change of a run (on SQLite and
    PostgreSQL, by triggers in the run's own transaction: by status, and by the request
    kind each row records). It reads no journal and no runs row, so its cost grows with
    neither what the runs did nor how many there are."""

    def __init__(self, target: Client | Store) -> None:
        self.store = target.store if isinstance(target, Client) else target
        """The store scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges, computed now."""
        runs = GaugeMetricFamily("underway_runs", "Runs by tenant and status.",
                                 labels=["tenant", "status"])
        dead = GaugeMetricFamily("underway_dead_runs", "Dead runs by tenant.",
                                 labels=["tenant"])
        pending = GaugeMetricFamily("underway_pending_requests",
                                    "Runs waiting for a person, by kind.",
                                    labels=["tenant", "kind"])
        dead_by: dict[str, int] = {}
        kinds: dict[str, dict[str, int]] = {}
        for tenant, status, n in self.store.run_counts():
            runs.add_metric([tenant, status], n)
            kinds.setdefault(tenant, {"approval": 0, "question": 0, "resolution": 0})
            if status == "dead":
                dead_by[tenant] = n
        for tenant, kind, n in self.store.request_counts():
            kinds.setdefault(tenant, {"approval": 0, "question": 0, "resolution": 0})[kind] = n
        for tenant in sorted(kinds):
            dead.add_metric([tenant], dead_by.get(tenant, 0))
            for kind, n in sorted(kinds[tenant].items()):
                pending.add_metric([tenant, kind], n)
        yield runs
        yield dead
        yield pending


def serve_metrics(registry: CollectorRegistry, port: int, *, addr: str = "0.0.0.0",
                  token: str | None = None) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` at ``http://addr:port/metrics`` from a daemon thread.

    Args:
        registry: The registry to serve.
        port: The port to listen on.
        addr: The address to listen on.
        token: The bearer token a scrape must send (None: none is asked for).

    Returns:
        The server and its thread; ``server.shutdown()`` stops it.
    """
    if token is None:
        server, thread = start_http_server(port, addr=addr, registry=registry)
        return server, thread
    app = _guarded(make_wsgi_app(registry), token)
    server = make_server(addr, port, app, _ThreadingServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True,
                              name="underway-metrics")
    thread.start()
    return server, thread


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """One thread a scrape, as prometheus-client's own server."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr for each scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _guarded(app: Any, token: str) -> Any:
    """``app`` behind ``Authorization: Bearer <token>``; anything else is a 401."""
    expected = f"Bearer {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Any) -> Any:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("WWW-Authenticate", 'Bearer realm="metrics"'),
        ])
        return [b"scraping these metrics needs Authorization: Bearer <token>\n"]

    return guarded
