"""Engine overhead per agent iteration, and journal bytes per iteration.

A 200-iteration run of :class:`underway.agent.Agent`: each iteration asks the model (a
:class:`~underway.testing.RuleModel`, which answers instantly by rules) for the next
action and calls one typed read-only tool; the conversation grows by an assistant turn
and a quoted tool result every iteration, as a real agent's does. Time spent inside the
model and the tool is measured and subtracted, so what remains is the engine: building
the request, journaling the model response and the tool result, folding, patching the
state and committing (two commits per iteration: the model response, then the step).

Baseline: one single-row INSERT + COMMIT on the same database (the floor of a durable
write), measured in the same run; the ratio is overhead per iteration over two floors.
Bytes are the run's stored events, blobs and checkpoints; the growth check compares the
bytes of the last 50 iterations with the first 50 (a conversation re-stored whole every
turn would grow quadratically).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir
from storage import _pg_bytes, _sqlite_bytes
from throughput import PostgresFloor, SQLiteFloor
from underway.agent import Agent
from underway.models.types import ModelRequest
from underway.store import connect
from underway.testing import RuleModel, say

ITERATIONS = 200
MARKS = (50, 150, 200)


class Query(BaseModel):
    """Arguments of the benchmark's tool."""

    account: str
    page: int


class Clock:
    """Adds up seconds spent outside the engine (model and tool)."""

    def __init__(self) -> None:
        self.outside = 0.0


def build(clock: Clock, measure: Any, after: dict[int, int]) -> Agent:
    @uw.tool(read_only=True)
    async def fetch_page(args: Query) -> dict[str, Any]:
        """Fetch one page of account activity."""
        began = time.perf_counter()
        out = {"account": args.account, "page": args.page,
               "rows": [{"id": args.page * 10 + i, "amount": 100 + i} for i in range(5)]}
        clock.outside += time.perf_counter() - began
        return out

    def brain(req: ModelRequest) -> Any:
        began = time.perf_counter()
        done = sum(1 for m in req.messages if m.role == "tool")
        if measure is not None and done in MARKS:
            after.setdefault(done, measure())
        if done >= ITERATIONS:
            out = say("All pages read.", ("finish", {"result": f"{done} pages"}))
        else:
            out = say(f"Reading page {done}.", ("fetch_page", {"account": "ACC-1", "page": done}))
        clock.outside += time.perf_counter() - began
        return out

    return Agent("bench_agent", model=RuleModel(brain), tools=[fetch_page], plan=False,
                 max_iterations=ITERATIONS + 5)


def run_agent(url: str, measure: Any = None) -> tuple[float, float, dict[int, int]]:
    """(engine seconds per iteration, wall seconds per iteration, bytes at marks)."""
    clock, after = Clock(), {}
    agent = build(clock, measure, after)
    store = connect(url)
    try:
        engine = uw.Engine(store, flows=[agent.flow])
        began = time.perf_counter()
        state = asyncio.run(uw.run(engine, agent.flow, {"goal": "read every page"}))
        wall = time.perf_counter() - began
        if state.status != "completed":
            raise RuntimeError(f"agent run ended {state.status}: {state.error}")
        iterations = state.state["iterations"]
        if measure is not None:
            after[ITERATIONS] = measure()
    finally:
        store.close()
    return (wall - clock.outside) / iterations, wall / iterations, after


def _figures(db: str, overhead: list[float], floor: float, after: dict[int, int]) -> list[Figure]:
    ms = median(overhead) * 1000
    first = after[50] / 50
    last = (after[200] - after[150]) / 50
    return [
        Figure(f"{db}.agent_overhead_per_iteration", ms, "ms", floor * 2000,
               ms / (floor * 2000), "< 10 ms", ms < 10,
               note="engine time per iteration (model and tool time excluded) against two "
                    "floor commits"),
        Figure(f"{db}.agent_bytes_per_iteration", after[200] / ITERATIONS, "bytes", None, None,
               note="stored events + blobs + checkpoints over a 200-iteration run"),
        Figure(f"{db}.agent_bytes_per_iteration_last_50", last, "bytes", first, last / first,
               "ratio ~ 1 (linear growth)", 0.5 <= last / first <= 1.5,
               note="baseline: bytes per iteration over the first 50 iterations"),
    ]


def bench_memory(*, reps: int = 3) -> list[Figure]:
    """Pure engine overhead (no database)."""
    runs = [run_agent("memory://")[0] for _ in range(reps)]
    ms = median(runs) * 1000
    return [Figure("memory.agent_overhead_per_iteration", ms, "ms", note="no database: "
                   "the Python cost of one iteration")]


def bench_sqlite(*, reps: int = 3) -> list[Figure]:
    """Agent iterations on SQLite."""
    with sqlite_dir() as d:
        floor = SQLiteFloor(os.path.join(d, "floor.db"))
        try:
            floors = [floor.seconds_per_commit(300) for _ in range(reps)]
        finally:
            floor.close()
        overhead, after = [], {}
        for i in range(reps):
            path = f"{d}/agent{i}.db"
            o, _, a = run_agent(f"sqlite:///{path}", _sqlite_bytes(path) if i == 0 else None)
            overhead.append(o)
            after = a or after
    return _figures("sqlite", overhead, median(floors), after)


def bench_postgres(*, reps: int = 3) -> list[Figure]:
    """Agent iterations on PostgreSQL."""
    if pg_store_missing():
        return []
    with pg_schema() as (schema, url):
        floor = PostgresFloor(schema)
        try:
            floors = [floor.seconds_per_commit(300) for _ in range(reps)]
        finally:
            floor.close()
    overhead, after = [], {}
    for i in range(reps):
        with pg_schema() as (schema, url):
            o, _, a = run_agent(url, _pg_bytes(schema) if i == 0 else None)
            overhead.append(o)
            after = a or after
    return _figures("postgres", overhead, median(floors), after)
