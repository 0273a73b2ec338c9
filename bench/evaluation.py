"""What ``underway eval`` and ``underway drift`` cost on a store of agent runs, against
decoding the same journals whole.

``RUNS`` agent runs are written straight through the journal, each ``TURNS`` turns of a
model call whose request carries the whole conversation so far (a chain of blobs, as the
agent stores it), the model's choice of tool with its arguments, a policy decision, the
call's intent and a result of about 2 KB, and the step's end with its state patch; then
completed. The baseline is what a report that decodes every event costs: each run's whole
journal read and decoded (``Journal.history``, blobs and conversations resolved). The
figures are :func:`underway.ops.evaluation.evaluate` and
:func:`underway.ops.evaluation.measure_drift` over the same runs; their figures must agree
with the baseline's count.
"""

from __future__ import annotations

import time
from typing import Any

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway import events as ev
from underway.events import genesis_hash
from underway.journal import Journal
from underway.ops.evaluation import evaluate, measure_drift
from underway.store import AppendBatch, NewRun, RunUpdate, Store

RUNS = 400
TURNS = 8
UNTIL = 1_800_000_000.0
REPEAT = 3
TOOLS = ("lookup", "send", "refund")


def _seed(store: Store) -> None:
    journal = Journal(store)
    for n in range(RUNS):
        run_id = f"run-{n:05d}"
        t = UNTIL - 20 * 86_400 + n * 3_000.0
        events: list[tuple[float, ev.RunEvent]] = [(t, ev.RunStarted(
            flow="agent", input={"goal": f"settle ticket {n} " + "context " * 60}, state={},
            first_step="act"))]
        # Each run's conversation and results are its own (nothing shared between runs).
        messages: list[dict[str, Any]] = [{"role": "user",
                                           "content": f"ticket {n} " * 150}]
        for turn in range(TURNS):
            t += 5
            key = f"{run_id}:{turn}:act:1"
            tool = TOOLS[(n + turn) % len(TOOLS)]
            call = {"key": key, "tool": tool, "index": 1}
            result = {"rows": [{"id": i, "text": f"{run_id} row {i} " * 12}
                               for i in range(12)]}
            events += [
                (t, ev.StepStarted(step="act")),
                (t, ev.ModelResponded(
                    key=f"{run_id}:{turn}:act:0", index=0, model="bench-model",
                    request={"messages": list(messages)}, response={"tool": tool},
                    tokens_in=900 + 300 * turn, tokens_out=80, cost_usd=0.001,
                    latency_ms=400.0)),
                (t, ev.ToolSelected(tool=tool, args={"query": "q " * 40}, reason="r " * 100)),
                (t, ev.PolicyDecided(**call, args_hash="h", decision="allow", rule_id=None,
                                     policy_version="v1")),
                (t, ev.ToolStarted(**call, args={"query": "q " * 40}, args_hash="h")),
                (t + 1, ev.ToolSucceeded(**call, args_hash="h", result=result,
                                         latency_ms=120.0)),
                (t + 1, ev.StepCompleted(step="act", next="act", patch=[
                    {"op": "add", "path": f"/notes/{turn}", "value": "note " * 200}])),
            ]
            messages += [{"role": "assistant", "content": f"{run_id} calls {tool} " * 20},
                         {"role": "tool", "content": f"{run_id} result {turn} " * 100}]
        events.append((t + 2, ev.RunCompleted(result={"done": True})))
        blobs: dict[str, bytes] = {}
        first = journal.encode("default", run_id, [(1, events[0][0], events[0][1])],
                               genesis_hash("default", run_id), blobs)
        store.create_run(NewRun(tenant_id="default", run_id=run_id, flow="agent",
                                idempotency_key=None, first_event=first[0], blobs=blobs,
                                step="act", now=events[0][0], next_wake_at=events[0][0]))
        (lease,) = store.claim(owner="bench", now=events[0][0], ttl=60.0,
                               tenant_id="default", run_id=run_id)
        blobs = {}
        rest = journal.encode("default", run_id,
                              [(i, at, e) for i, (at, e) in enumerate(events[1:], 2)],
                              first[0].hash, blobs)
        store.append(AppendBatch(tenant_id="default", run_id=run_id, expected_seq=1,
                                 fence=lease.token, events=rest, now=events[-1][0],
                                 update=RunUpdate("completed", None, None), blobs=blobs,
                                 release=True))


def _decode_all(url: str) -> tuple[float, int]:
    """Every run's journal decoded whole, by a fresh store (cold caches): seconds, and the
    model calls it counts."""
    store = uw.connect(url)
    try:
        began = time.perf_counter()
        journal = Journal(store)
        calls = 0
        for run_id in [r.run_id for r in store.list_runs("default", limit=RUNS + 1)]:
            calls += sum(1 for r in journal.history("default", run_id)
                         if isinstance(r.event, ev.ModelResponded))
        return time.perf_counter() - began, calls
    finally:
        store.close()


def _eval(url: str) -> tuple[float, int, int]:
    store = uw.connect(url)
    try:
        began = time.perf_counter()
        found = evaluate(store)
        return time.perf_counter() - began, found.cost.model_calls, found.reading.payload_bytes
    finally:
        store.close()


def _drift(url: str) -> float:
    store = uw.connect(url)
    try:
        began = time.perf_counter()
        measure_drift(store, until=UNTIL, window=5 * 86_400, baseline=15 * 86_400)
        return time.perf_counter() - began
    finally:
        store.close()


def _bench(db: str, url: str) -> list[Figure]:
    store = uw.connect(url)
    try:
        _seed(store)
    finally:
        store.close()
    full, evals, drifts = [], [], []
    for _ in range(REPEAT):  # interleaved, so load on the machine hits all three alike
        seconds, calls = _decode_all(url)
        full.append(seconds)
        seconds, counted, read = _eval(url)
        evals.append(seconds)
        drifts.append(_drift(url))
        if counted != calls:
            raise AssertionError(f"eval counted {counted} model calls, the journals {calls}")
    base = median(full)
    e, d = median(evals), median(drifts)
    note = f"{RUNS} runs x {TURNS} turns; eval read {read / 1024:,.0f} KiB of event payloads"
    return [
        Figure(f"{db}.eval_decode_all", base, "s", target="baseline", note=note),
        Figure(f"{db}.eval", e, "s", base, e / base, "≤ 0.5", e / base <= 0.5),
        Figure(f"{db}.drift", d, "s", base, d / base, "≤ 0.5", d / base <= 0.5),
    ]


def bench_sqlite() -> list[Figure]:
    """The figures on SQLite."""
    with sqlite_dir() as folder:
        return _bench("sqlite", f"sqlite:///{folder}/evaluation.db")


def bench_postgres() -> list[Figure]:
    """The figures on PostgreSQL."""
    with pg_schema() as (_, url):
        return _bench("postgres", url)
