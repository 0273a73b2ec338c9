"""OpenTelemetry traces of the runs an engine drives, exported from the journal.

A worker never holds a span in memory that the journal does not hold. The spans of a run
are derived from its journaled events (:mod:`._spans`), with ids derived from the run and
the events, and sent by a background thread in batches. After a batch is sent, each run's
span cursor (:class:`~underway.store.spans.SpanExportStore`) moves to the last event sent.
A worker killed at any moment loses nothing: the next worker that takes a run up, or the
next worker to start, sends what was journaled and not yet sent. A batch sent twice has the
same span ids, so a backend keeps one copy.

The step never waits on this. A commit only notes the run (a set insertion); the thread
reads the new events and sends their spans.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .. import events as ev
from .. import faults
from .._extras import needs_extra
from ..agent import AgentState
from ..events import JSON
from ..journal import Journal
from ..journal.state import RunState
from ._seam import Metrics
from ._spans import RunSpans, SpanRecord, tools_of

with needs_extra("otel", "traces (underway.telemetry.Tracing)"):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

if TYPE_CHECKING:
    from ..effects import Tool
    from ..flow import Flow
    from ..store.base import Store

log = logging.getLogger(__name__)

_SCOPE = InstrumentationScope("underway")
_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_CACHED_RUNS = 4096
"""Runs whose derivation a process keeps between batches (the rest read their journal
again)."""
_KEPT_ARGS = 4096
"""Read-only calls whose opted-in arguments a process keeps until their span is sent."""


class Tracing(Metrics):
    """Spans of the runs an engine drives, derived from their journals and sent to
    ``exporter`` (``Engine(metrics=Tracing(store, exporter, flows=flows))``; with
    Prometheus metrics, ``Fanout(PrometheusMetrics(), Tracing(...))``).

    Args:
        store: The store the engine journals into; the span cursors live there too.
        exporter: Where spans go (:func:`~underway.telemetry.span_exporter`, or any
            OpenTelemetry SDK span exporter).
        flows: The engine's flows (or agents' flows): their tools' opt-ins say which
            argument and result fields a span records, and an agent's runs are
            ``invoke_agent`` spans.
        service_name: The resource's ``service.name``.
        interval: Seconds the thread gathers commits before it sends a batch.
        recover_window: At start, send what runs handed back in this many seconds
            journaled and no worker sent (None: do not look).
    """

    enabled = True

    def __init__(self, store: Store, exporter: SpanExporter, *,
                 flows: Iterable[Flow[Any, Any]] = (), service_name: str = "underway",
                 interval: float = 0.5, recover_window: float | None = 86_400.0) -> None:
        self.store = store
        """Where journals and span cursors are read."""
        self.exporter = exporter
        """Where spans are sent."""
        self.interval = interval
        """Seconds a batch gathers commits."""
        self.exported = 0
        """Spans sent so far by this process."""
        flows = list(flows)
        self._tools = tools_of(flows)
        self._agents = frozenset(f.name for f in flows if _is_agent(f))
        self._journal = Journal(store)
        self._resource = Resource.create({"service.name": service_name})
        self._pending: set[tuple[str, str]] = set()
        self._runs: OrderedDict[tuple[str, str], RunSpans] = OrderedDict()
        self._args: OrderedDict[str, JSON] = OrderedDict()
        self._taken_up: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._passing = threading.Lock()
        self._stop = threading.Event()
        self._recover = recover_window
        self._thread = threading.Thread(target=self._loop, name="underway-spans", daemon=True)
        self._thread.start()

    # -- the engine's seam: a set insertion per commit --------------------------------
    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        """Note the run: what an earlier worker journaled and did not send goes now.

        Args:
            state: The run loaded.
            wake_latency: Seconds from when it was due to now.
            takeover: True when the run was taken over.
        """
        with self._lock:
            self._taken_up.add((state.tenant_id, state.run_id))
        self._note(state.tenant_id, state.run_id)

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Note the run: the thread sends the spans its new events end.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The committed events ``(seq, at, event)``.
        """
        self._note(tenant_id, run_id)

    def calling(self, tenant_id: str, run_id: str, key: str, tool: Tool,
                args: JSON) -> None:
        """Keep the arguments of a call whose tool lets some of them be recorded: the
        journal keeps a mutating call's, not a read-only one's.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            key: The call's idempotency key.
            tool: The tool called.
            args: The call's arguments.
        """
        if tool.trace_args and not tool.mutating:
            with self._lock:
                self._args[key] = args
                while len(self._args) > _KEPT_ARGS:
                    self._args.popitem(last=False)

    def _call_args(self, key: str) -> JSON | None:
        with self._lock:
            return self._args.pop(key, None)

    def _note(self, tenant_id: str, run_id: str) -> None:
        with self._lock:
            self._pending.add((tenant_id, run_id))
        self._wake.set()

    # -- the thread ---------------------------------------------------------------------
    def flush(self) -> int:
        """Send the spans of every noted run now, in the calling thread; the spans sent.

        Use it before a process stops, or in a test.
        """
        return self._pass()

    def export_runs(self, runs: Iterable[tuple[str, str]]) -> int:
        """Send what the journals of ``runs`` (``(tenant_id, run_id)``) hold and their
        span cursors say was not sent; the spans sent.

        Args:
            runs: The runs.
        """
        with self._lock:
            self._pending.update(runs)
        return self._pass()

    def shutdown(self) -> None:
        """Send what is noted, stop the thread and shut the exporter down."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._pass()
        self.exporter.shutdown()

    def _loop(self) -> None:
        if self._recover is not None:
            self._recovered(time.time() - self._recover)
        while True:
            self._wake.wait()
            # Gather the commits of a little while into one batch.
            if self._stop.wait(self.interval):
                return
            self._wake.clear()
            try:
                self._pass()
            except Exception:
                log.exception("spans could not be sent; they are sent again later")

    def _recovered(self, since: float) -> None:
        try:
            runs = self.store.unexported_runs(since=since, limit=10_000)
        except Exception:
            log.exception("could not find the runs whose spans were not sent")
            return
        if runs:
            self.export_runs(runs)

    def _pass(self) -> int:
        with self._passing:
            with self._lock:
                runs, self._pending = self._pending, set()
            if not runs:
                return 0
            spans: list[ReadableSpan] = []
            heads: list[tuple[str, str, int]] = []
            for tenant_id, run_id in sorted(runs):
                try:
                    found = self._derive(tenant_id, run_id)
                except Exception:
                    log.exception("spans of run %s/%s could not be derived", tenant_id,
                                  run_id)
                    continue
                if found is not None:
                    spans += [self._readable(s) for s in found[0]]
                    heads.append((tenant_id, run_id, found[1]))
            if spans:
                faults.point("spans.before_send")
                try:
                    result = self.exporter.export(spans)
                except Exception:
                    log.exception("the exporter failed")
                    result = SpanExportResult.FAILURE
                faults.point("spans.after_send")
                if result is not SpanExportResult.SUCCESS:
                    # Not sent: the cursors stay; the runs are tried again next batch.
                    log.warning("the exporter refused %d spans; sending them again later",
                                len(spans))
                    self._forget(runs)
                    with self._lock:
                        self._pending |= runs
                    self._wake.set()
                    return 0
            for tenant_id, run_id, head in heads:
                try:
                    self.store.advance_span_cursor(tenant_id, run_id, head)
                except Exception:
                    log.exception("the span cursor of run %s/%s could not be moved",
                                  tenant_id, run_id)
            self.exported += len(spans)
            return len(spans)

    def _derive(self, tenant_id: str, run_id: str) -> tuple[list[SpanRecord], int] | None:
        """The spans run ``run_id`` ended past its cursor, and its journal's head."""
        key = (tenant_id, run_id)
        derived = self._runs.pop(key, None)
        with self._lock:
            if key in self._taken_up:
                # Another worker may have had the run since: its cursor says what it sent.
                self._taken_up.discard(key)
                derived = None
        if derived is not None:
            # This process sent everything up to there, and has had the run since.
            cursor = derived.seq
        else:
            cursor = self.store.span_cursor(tenant_id, run_id)
            derived = RunSpans(tenant_id, run_id, tool=self._tools.get,
                               agent=self._agents.__contains__, calls=self._call_args)
        stored = self.store.load_events(tenant_id, run_id, after_seq=derived.seq)
        if not stored:
            self._keep(key, derived)
            return None
        records = self._journal.decode(tenant_id, run_id, stored)
        spans = [s for s in derived.feed((r.seq, r.at, r.event) for r in records)
                 if s.ended_at_seq > cursor]
        self._keep(key, derived)
        return spans, derived.seq

    def _keep(self, key: tuple[str, str], derived: RunSpans) -> None:
        if derived.ended:
            return
        self._runs[key] = derived
        while len(self._runs) > _CACHED_RUNS:
            self._runs.popitem(last=False)

    def _forget(self, runs: Iterable[tuple[str, str]]) -> None:
        for key in runs:
            self._runs.pop(key, None)

    def _readable(self, s: SpanRecord) -> ReadableSpan:
        trace_id = int(s.trace_id, 16)
        parent = None if s.parent_id is None else SpanContext(
            trace_id, int(s.parent_id, 16), is_remote=False, trace_flags=_SAMPLED)
        status = Status(StatusCode.ERROR, s.error) if s.error is not None else Status()
        return ReadableSpan(
            s.name, SpanContext(trace_id, int(s.span_id, 16), is_remote=False,
                                trace_flags=_SAMPLED),
            parent, self._resource, s.attributes, kind=_KINDS[s.kind], status=status,
            start_time=int(s.start * 1e9), end_time=int(s.end * 1e9),
            instrumentation_scope=_SCOPE)


def _is_agent(flow: Flow[Any, Any]) -> bool:
    return flow.state_type is AgentState
