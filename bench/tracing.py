"""Traces exported from the journal: what they cost a step.

A loop of read-only steps (``throughput.loop_flow``) runs in one activation, with and
without :class:`~underway.telemetry.Tracing`, interleaved. The exporter encodes each batch
as OTLP protobuf (what the OTLP/HTTP exporter posts) and drops it, so the figure counts
the encoding but no network. Wall time per step is the hot path's cost; process CPU per
step (every thread, and the final batch sent after the run) is the whole cost.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from throughput import TENANT, loop_flow
from underway.store import connect
from underway.telemetry import Tracing


class EncodingExporter(SpanExporter):
    """Encodes every batch as OTLP protobuf, then drops it."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Encode the batch."""
        self.bytes += len(encode_spans(spans).SerializeToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def one_run(store: Any, n: int, *, traced: bool) -> tuple[float, float, float, int]:
    """Wall seconds per step, the event loop thread's CPU seconds per step (the hot path:
    the engine's own work, the store's I/O threads apart), process CPU seconds per step
    (every thread, the final batch included) and spans sent, of one activation of ``n``
    steps."""
    flow, tool = loop_flow(mutating=False)
    tracing = Tracing(store, EncodingExporter(), flows=[flow], recover_window=None) \
        if traced else None
    engine = uw.Engine(store, flows=[flow], tools=[tool], metrics=tracing)
    run_id, _ = engine.start(flow, {"n": n}, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    cpu, began = time.process_time(), time.perf_counter()
    state, loop_cpu = asyncio.run(_activate(engine, lease))
    wall = time.perf_counter() - began
    sent = 0
    if tracing is not None:
        tracing.shutdown()
        sent = tracing.exported
    cpu = time.process_time() - cpu
    if state.status != "completed":
        raise RuntimeError(f"benchmark run ended {state.status}")
    return wall / n, loop_cpu / n, cpu / n, sent


def _seam_seconds(store: Any, calls: int = 20_000) -> float:
    """CPU seconds of the seam calls one read-only step makes (two commits), timed alone,
    with the export thread idle (no batch ever goes out: its interval is never reached)."""
    tracing = Tracing(store, EncodingExporter(), recover_window=None, interval=3600.0)
    events: list[Any] = []
    began = time.thread_time()
    for i in range(calls):
        tracing.committed(TENANT, f"r{i % 64}", "f", events)
        tracing.committed(TENANT, f"r{i % 64}", "f", events)
    spent = (time.thread_time() - began) / calls
    tracing.shutdown()  # the runs noted do not exist: nothing is sent
    return spent


async def _activate(engine: uw.Engine, lease: Any) -> tuple[Any, float]:
    began = time.thread_time()
    state = await engine.activate(lease)
    return state, time.thread_time() - began


def _measure(db: str, store: Any, n: int, reps: int) -> list[Figure]:
    one_run(store, 200, traced=False)
    one_run(store, 200, traced=True)
    walls: dict[bool, list[float]] = {False: [], True: []}
    loops: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    sent = 0
    for _ in range(reps):
        for traced in (False, True):
            wall, loop, cpu, spans = one_run(store, n, traced=traced)
            walls[traced].append(wall)
            loops[traced].append(loop)
            cpus[traced].append(cpu)
            sent = max(sent, spans)
    if sent < n:
        raise RuntimeError(f"only {sent} spans were sent for {n} steps")
    note = _seam_seconds(store)
    w0, w1 = median(walls[False]), median(walls[True])
    l0, l1 = median(loops[False]), median(loops[True])
    c0, c1 = median(cpus[False]), median(cpus[True])
    return [
        Figure(f"{db}.tracing_step_loop_cpu", l1 * 1e6, "µs CPU/step", l0 * 1e6, l1 / l0,
               "diagnostic", None,
               "read-only step, traces on vs off: the event loop's CPU (the hot path); "
               "moves ±30% with the load of a shared machine"),
        Figure(f"{db}.tracing_seam_per_step", note * 1e6, "µs CPU/step", l0 * 1e6,
               note / l0, "≤ 0.02", note / l0 <= 0.02,
               "what the engine calls per step (an activation's note, two commits' notes), "
               "timed alone against the step's event-loop CPU: steady on a loaded machine"),
        Figure(f"{db}.tracing_step_wall", w1 * 1e6, "µs/step", w0 * 1e6, w1 / w0,
               "diagnostic", None, "wall time per step; moves with the machine's load"),
        Figure(f"{db}.tracing_step_cpu", c1 * 1e6, "µs CPU/step", c0 * 1e6, c1 / c0,
               "diagnostic", None,
               f"every thread, last batch included; {sent} spans per run"),
    ]


def bench_sqlite(*, steps: int = 1000, reps: int = 3) -> list[Figure]:
    """Traces' cost per step on SQLite."""
    with sqlite_dir() as d:
        store = connect(f"sqlite:///{os.path.join(d, 'underway.db')}")
        try:
            return _measure("sqlite", store, steps, reps)
        finally:
            store.close()


def bench_postgres(*, steps: int = 500, reps: int = 3) -> list[Figure]:
    """Traces' cost per step on PostgreSQL."""
    with pg_schema() as (_, url):
        store = connect(url)
        try:
            return _measure("postgres", store, steps, reps)
        finally:
            store.close()
