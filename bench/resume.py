"""Resume latency: how long a long-lived run takes to pick up again.

Two figures per database:

* for runs with 1k, 10k and 100k events of history, the time to load the run's state
  (``engine.journal.load``: checkpoint + tail) and the time from claiming the run to the
  start of its first step in a fresh engine. Recovery is checkpoint + tail, so the 100k
  figure should stay within 2x the 1k one;
* a run killed mid-flight (SIGKILL at a fault point) and a fresh process that resumes it:
  the milliseconds from "imports done, store opened" to the start of the first resumed step;
* a run killed as ``make bench-peers`` kills it, taken over by a fresh process of its
  worker: the milliseconds from "imports done" (the store not yet open) to its first
  resumed step, against a floor process and LangGraph (``resume_takeover.py``);
* an agent whose conversation holds 200 messages, stopped mid-step (its worker gone, the
  lease left behind) and taken over by a fresh engine: the store queries and milliseconds
  its state load takes, against the same load reading one blob a query, as the journal
  read a conversation's blobs before they were read in batches.

Histories are written straight through the journal (``Journal.encode`` + ``store.append``
under a held lease, as the engine writes them, checkpoint included) and must verify.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from pydantic import BaseModel

import resume_takeover
import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir
from underway import events as ev
from underway.agent import Agent
from underway.effects import args_hash, idempotency_key
from underway.journal.state import Recorded, apply
from underway.store import Store, connect
from underway.store.base import AppendBatch, RunUpdate
from underway.store.journal import BLOB_BATCH
from underway.testing import RuleModel, say

TENANT = "default"
SIZES = (1_000, 10_000, 100_000)
TAIL = 60
"""Events after the last checkpoint: the engine checkpoints every 100, so a resumed run
finds between 0 and ~100; every size gets the same tail so only the history differs."""
BATCH = 3_000
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resume_child.py")


class HistoryState(BaseModel):
    """A counter the history's steps advance."""

    i: int = 0


class _Reached(BaseException):
    """Stops the activation at the start of its first step, leaving the journal untouched
    so every repetition resumes the same history."""


_first_step_at: list[float] = []

history_flow: uw.Flow[HistoryState, Any] = uw.Flow("history", state=HistoryState)


@history_flow.step
async def tick(ctx: uw.RunContext[HistoryState, Any]) -> Any:
    _first_step_at.append(time.perf_counter())
    raise _Reached


def build_history(store: Any, n_events: int) -> str:
    """Create a run with ``n_events`` events (checkpointed ``TAIL`` events before the end)."""
    engine = uw.Engine(store, flows=[history_flow])
    run_id, _ = engine.start(history_flow, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    state = engine.journal.load(TENANT, run_id)
    row = store.get_run(TENANT, run_id)
    last_hash = row.last_hash
    steps = (n_events - 1) // 3
    checkpoint_at = n_events - TAIL
    pending: list[tuple[int, float, ev.Event]] = []
    h = args_hash("noop", {})

    def flush(with_checkpoint: bool) -> None:
        nonlocal last_hash, pending
        blobs: dict[str, bytes] = {}
        checkpoint = None
        if with_checkpoint:
            # The last pending event commits to the checkpoint, as the engine writes one.
            stored, checkpoint = engine.journal.encode_checkpointed(
                state, pending, last_hash, blobs
            )
        else:
            stored = engine.journal.encode(TENANT, run_id, pending, last_hash, blobs)
        now = time.time()
        store.append(AppendBatch(
            tenant_id=TENANT, run_id=run_id, expected_seq=pending[0][0] - 1, fence=lease.token,
            events=stored, now=now, update=RunUpdate("ready", "tick", now), blobs=blobs,
            checkpoint=checkpoint,
        ))
        last_hash = stored[-1].hash
        pending = []

    at = time.time()
    for k in range(steps):
        key = idempotency_key(run_id, "tick", 0, ordinal=k)
        for event in (
            ev.StepStarted(step="tick"),
            ev.ToolSucceeded(key=key, tool="noop", index=0, args_hash=h, result=None,
                             latency_ms=0.01),
            ev.StepCompleted(step="tick", next="tick",
                             patch=[{"op": "replace", "path": "/i", "value": k + 1}]),
        ):
            at += 0.0001
            rec = Recorded(state.seq + 1, at, event)
            apply(state, rec)
            pending.append((rec.seq, rec.at, event))
            if state.seq == checkpoint_at:
                flush(True)
        if len(pending) >= BATCH:
            flush(False)
    if pending:
        flush(False)
    store.release(lease)
    verdict = engine.journal.verify(TENANT, run_id)
    if not verdict.ok or verdict.events != n_events:
        raise RuntimeError(f"built history does not verify: {verdict}")
    return run_id


def load_seconds(store: Any, run_id: str, n_events: int) -> float:
    """Seconds for a fresh engine's ``journal.load`` of the run."""
    engine = uw.Engine(store, flows=[history_flow])
    began = time.perf_counter()
    state = engine.journal.load(TENANT, run_id)
    elapsed = time.perf_counter() - began
    if state.seq != n_events:
        raise RuntimeError(f"loaded seq {state.seq}, expected {n_events}")
    return elapsed


def first_step_seconds(store: Any, run_id: str) -> float:
    """Seconds from a fresh engine's claim of the run to the start of its first step."""
    engine = uw.Engine(store, flows=[history_flow])
    _first_step_at.clear()

    async def resume() -> float:
        began = time.perf_counter()
        [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
        try:
            await engine.activate(lease)
        except _Reached:
            pass
        finally:
            store.release(lease)
        return began

    began = asyncio.run(resume())
    if not _first_step_at:
        raise RuntimeError("the resumed activation never started a step")
    return _first_step_at[0] - began


def _history_figures(db: str, store: Any, reps: int) -> list[Figure]:
    load: dict[int, float] = {}
    first: dict[int, float] = {}
    build: dict[int, float] = {}
    runs: dict[int, str] = {}
    for n in SIZES:
        began = time.perf_counter()
        runs[n] = build_history(store, n)
        build[n] = time.perf_counter() - began
    loads: dict[int, list[float]] = {n: [] for n in SIZES}
    firsts: dict[int, list[float]] = {n: [] for n in SIZES}
    # Round-robin over the sizes so drift in the machine's load hits them alike; the
    # first round warms caches and is discarded.
    for rep in range(reps + 1):
        for n in SIZES:
            load_s = load_seconds(store, runs[n], n)
            first_s = first_step_seconds(store, runs[n])
            if rep:
                loads[n].append(load_s)
                firsts[n].append(first_s)
    for n in SIZES:
        load[n], first[n] = median(loads[n]), median(firsts[n])
    small = SIZES[0]
    out: list[Figure] = []
    for n in SIZES:
        label = f"{n // 1000}k"
        base_l = load[small] * 1000 if n != small else None
        base_f = first[small] * 1000 if n != small else None
        out.append(Figure(
            f"{db}.resume_load_{label}", load[n] * 1000, "ms", base_l,
            load[n] / load[small] if n != small else None,
            "ratio <= 2" if n == SIZES[-1] else "",
            load[n] / load[small] <= 2 if n == SIZES[-1] else None,
            note=f"checkpoint + {TAIL}-event tail; history built in {build[n]:.1f}s",
        ))
        out.append(Figure(
            f"{db}.resume_first_step_{label}", first[n] * 1000, "ms", base_f,
            first[n] / first[small] if n != small else None,
            "ratio <= 2" if n == SIZES[-1] else "",
            first[n] / first[small] <= 2 if n == SIZES[-1] else None,
            note="claim + load + run row + inbox, until the step body starts",
        ))
    return out


# -- a killed run resumed by a fresh process -------------------------------------------------
def _child(
    mode: str, url: str, run_id: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, CHILD, mode, url, run_id], env={**os.environ, **env},
        capture_output=True, text=True, timeout=120, check=False,
    )


def crash_resume_ms(url: str, run_id: str) -> float:
    """Kill a child mid-run, resume in a fresh child; ms from its readiness to first step."""
    crashed = _child("crash", url, run_id, {"UNDERWAY_CRASH_AFTER": "500"})
    if crashed.returncode != -9:
        raise RuntimeError(
            f"crash child exited {crashed.returncode}, expected SIGKILL: {crashed.stderr[-2000:]}"
        )
    resumed = _child("resume", url, run_id, {"UNDERWAY_CRASH_AFTER": ""})
    if resumed.returncode != 0:
        raise RuntimeError(f"resume child failed: {resumed.stderr[-2000:]}")
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    if report["run_id"] != run_id:
        raise RuntimeError(f"resumed {report['run_id']}, expected the killed run {run_id}")
    return (float(report["first_step"]) - float(report["ready"])) * 1000


def _crash_figure(db: str, values: list[float], note: str) -> Figure:
    ms = median(values)
    return Figure(f"{db}.crash_resume_first_step", ms, "ms", None, None, "value <= 50 ms",
                  ms <= 50, note=f"{note}; runs: " + ", ".join(f"{v:.1f}" for v in values))


# -- a long conversation taken over after a crash ------------------------------------------
MESSAGES = 200
"""Messages in the conversation the taken-over agent holds (an assistant turn and a tool
result per iteration)."""


class Account(BaseModel):
    """Arguments of the taken-over agent's tool."""

    account: str


class _Crash(BaseException):
    """Stops the agent mid-step, as a killed worker stops: nothing more is committed and
    its lease is left behind."""


def build_conversation(store: Store) -> tuple[str, str]:
    """(run id, lease owner) of an agent run stopped mid-step with :data:`MESSAGES` messages."""

    @uw.tool(read_only=True)
    async def lookup(args: Account) -> dict[str, Any]:
        """Look an account up."""
        return {"account": args.account, "rows": [{"id": i, "amount": 100 + i}
                                                  for i in range(5)]}

    def brain(req: Any) -> Any:
        done = sum(1 for m in req.messages if m.role == "tool")
        if done * 2 >= MESSAGES:
            raise _Crash
        return say(f"Looking up page {done}.", ("lookup", {"account": f"ACC-{done}"}))

    agent = Agent("takeover_agent", model=RuleModel(brain), tools=[lookup], plan=False,
                  max_iterations=MESSAGES)
    engine = uw.Engine(store, flows=[agent.flow])
    run_id, _ = engine.start(agent.flow, {"goal": "look every account up"}, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    try:
        asyncio.run(engine.activate(lease))
    except _Crash:
        pass
    else:
        raise RuntimeError("the agent finished instead of stopping mid-step")
    return run_id, lease.owner


class Counted:
    """The store, counting the queries a state load sends (a batch of blobs counts once per
    query it takes); with ``one_blob_a_query`` it cannot follow a chain of blobs, so every
    blob costs a query of its own."""

    def __init__(self, store: Store, *, one_blob_a_query: bool) -> None:
        self._store = store
        self._one = one_blob_a_query
        self.queries = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.queries += 1
            return attr(*args, **kwargs)

        return counted

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        self.queries += max(1, -(-len(keys) // BLOB_BATCH))
        return self._store.get_blobs(tenant_id, keys)

    def get_blob_chain(self, tenant_id: str, key: str, *, limit: int) -> dict[str, bytes]:
        self.queries += 1
        if self._one:
            return self._store.get_blobs(tenant_id, [key])
        return self._store.get_blob_chain(tenant_id, key, limit=limit)


def takeover_load(store: Store, run_id: str, *, one_blob_a_query: bool) -> tuple[float, int]:
    """(seconds, queries) of a fresh engine's load of the run's state (empty caches)."""
    counted = Counted(store, one_blob_a_query=one_blob_a_query)
    engine = uw.Engine(counted, flows=[])  # type: ignore[arg-type]
    began = time.perf_counter()
    state, _, _ = engine.journal.load_head(TENANT, run_id)
    elapsed = time.perf_counter() - began
    messages = state.state.get("messages") if isinstance(state.state, dict) else None
    if not isinstance(messages, list) or len(messages) < MESSAGES:
        raise RuntimeError(f"loaded {len(messages or [])} messages, expected {MESSAGES}")
    return elapsed, counted.queries


def _takeover_figures(db: str, store: Store, reps: int) -> list[Figure]:
    run_id, owner = build_conversation(store)
    # What a takeover does once the holder is known dead; then it claims and loads.
    store.expire_lease(TENANT, run_id, owner)
    if len(store.claim(owner="taker", now=time.time(), ttl=60, run_id=run_id,
                       tenant_id=TENANT)) != 1:
        raise RuntimeError("the stopped run could not be taken over")
    batched: list[tuple[float, int]] = []
    single: list[tuple[float, int]] = []
    # Interleaved so drift in the machine's load hits both alike; the first round warms up.
    for rep in range(reps + 1):
        b = takeover_load(store, run_id, one_blob_a_query=False)
        o = takeover_load(store, run_id, one_blob_a_query=True)
        if rep:
            batched.append(b)
            single.append(o)
    ms, base_ms = median([t for t, _ in batched]) * 1000, median([t for t, _ in single]) * 1000
    queries, base_q = batched[0][1], single[0][1]
    return [
        Figure(f"{db}.takeover_load_200_messages_queries", queries, "queries", base_q,
               queries / base_q, "ratio <= 0.1", queries / base_q <= 0.1,
               note="store queries of a fresh engine's state load of an agent stopped "
                    "mid-step; baseline: the same load reading one blob a query"),
        Figure(f"{db}.takeover_load_200_messages", ms, "ms", base_ms, ms / base_ms,
               "ratio < 1", ms < base_ms,
               note="the same load timed; baseline: one blob a query"),
    ]


def bench_sqlite(*, reps: int = 15, cycles: int = 5) -> list[Figure]:
    """History resume, conversation takeover and crash resume on SQLite."""
    with sqlite_dir() as d:
        store = connect(f"sqlite:///{d}/history.db")
        try:
            figures = _history_figures("sqlite", store, reps)
            figures += _takeover_figures("sqlite", store, reps)
        finally:
            store.close()
        values = [
            crash_resume_ms(f"sqlite:///{d}/crash{i}.db", f"crash-{i}") for i in range(cycles)
        ]
    figures.append(_crash_figure("sqlite", values, "median of fresh-process resumes"))
    return figures + resume_takeover.figures("sqlite", cycles)


def bench_postgres(*, reps: int = 15, cycles: int = 5) -> list[Figure]:
    """History resume, conversation takeover and crash resume on PostgreSQL (skipped
    without a PostgreSQL store)."""
    if pg_store_missing():
        return []
    with pg_schema() as (_, url):
        store = connect(url)
        try:
            figures = _history_figures("postgres", store, reps)
            figures += _takeover_figures("postgres", store, reps)
        finally:
            store.close()
    values = []
    for i in range(cycles):
        with pg_schema() as (_, url):
            values.append(crash_resume_ms(url, f"crash-{i}"))
    figures.append(_crash_figure("postgres", values, "median of fresh-process resumes"))
    return figures + resume_takeover.figures("postgres", cycles)
