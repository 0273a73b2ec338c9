"""Durable step throughput against the raw commit floor of the same database.

The floor is the cheapest durable write the database offers: one single-row INSERT and a
COMMIT (SQLite: WAL, ``synchronous=FULL``; PostgreSQL: ``synchronous_commit=on``). A step
is driven exactly as in production — an :class:`~underway.Engine` activation of a flow whose
step calls one no-op tool and goes to itself — and costs:

* read-only tool: one commit (``StepStarted``, ``ToolSucceeded``, ``StepCompleted``);
* mutating tool: two commits (the ``ToolStarted`` intent, then outcome + ``StepCompleted``).

``ratio`` is the time per step over the time of the commits it needs (one or two floor
commits): lower is better, the goal is at most 1.5.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import (
    Figure,
    TimedStore,
    median,
    per_second,
    pg_base_url,
    pg_schema,
    pg_store_missing,
    sqlite_dir,
)
from underway.store import connect

TENANT = "default"
PAYLOAD = os.urandom(100)
TARGET = 1.5


class LoopState(BaseModel):
    """How many steps have run."""

    i: int = 0


class LoopInput(BaseModel):
    """How many steps to run."""

    n: int


def loop_flow(*, mutating: bool) -> tuple[uw.Flow[Any, Any], uw.Tool]:
    """A flow whose one step calls a no-op tool and goes to itself ``n`` times."""
    kind = "mutating" if mutating else "readonly"

    async def nothing(args: Any) -> None:
        return None

    noop: uw.Tool = uw.tool(nothing, name=f"noop_{kind}", mutating=mutating, idempotent=True)

    flow: uw.Flow[LoopState, LoopInput] = uw.Flow(f"loop_{kind}", state=LoopState, input=LoopInput)

    @flow.step
    async def tick(ctx: uw.RunContext[LoopState, LoopInput]) -> Any:
        await ctx.call(noop, {})
        ctx.state.i += 1
        return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)

    return flow, noop


def steps_seconds(store: Any, flow: uw.Flow[Any, Any], tool: uw.Tool, n: int) -> float:
    """Seconds per step of one activation that runs ``n`` steps (claim excluded)."""
    engine = uw.Engine(store, flows=[flow], tools=[tool])
    run_id, _ = engine.start(flow, {"n": n}, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    began = time.perf_counter()
    state = asyncio.run(engine.activate(lease))
    elapsed = time.perf_counter() - began
    if state.status != "completed" or state.steps_completed != n:
        raise RuntimeError(f"benchmark run ended {state.status} after {state.steps_completed}")
    return elapsed / n


# -- floors -------------------------------------------------------------------------------
class SQLiteFloor:
    """Single-row INSERT + COMMIT on its own SQLite file, configured like the store."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE floor (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)"
        )

    def seconds_per_commit(self, n: int) -> float:
        """Mean seconds of ``n`` commits."""
        c = self.conn
        began = time.perf_counter()
        for _ in range(n):
            c.execute("BEGIN IMMEDIATE")
            c.execute("INSERT INTO floor (payload) VALUES (?)", (PAYLOAD,))
            c.execute("COMMIT")
        return (time.perf_counter() - began) / n

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


class PostgresFloor:
    """Single-row INSERT + COMMIT in the benchmark's schema, ``synchronous_commit=on``."""

    def __init__(self, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(pg_base_url())
        self.conn.execute(f'SET search_path TO "{schema}"')
        self.conn.execute("SET synchronous_commit = on")
        self.conn.execute(
            "CREATE TABLE floor (id BIGSERIAL PRIMARY KEY, payload BYTEA NOT NULL)"
        )
        self.conn.commit()

    def seconds_per_commit(self, n: int) -> float:
        """Mean seconds of ``n`` commits."""
        c = self.conn
        began = time.perf_counter()
        for _ in range(n):
            c.execute("INSERT INTO floor (payload) VALUES (%s)", (PAYLOAD,))
            c.commit()
        return (time.perf_counter() - began) / n

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def server_synchronous_commit() -> str:
    """What a new PostgreSQL session (such as the store's) gets as ``synchronous_commit``."""
    import psycopg

    with psycopg.connect(pg_base_url()) as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        return str(row[0]) if row else "?"


# -- the benchmark --------------------------------------------------------------------------
def _figures(db: str, floor: list[float], ro: list[float], mut: list[float],
             ro_split: tuple[float, float, float], note: str) -> list[Figure]:
    f, r, m = median(floor), median(ro), median(mut)
    append_s, appends_per_step, split_total = ro_split
    outside = split_total - append_s
    figures = [
        Figure(f"{db}.floor_1", per_second(f), "commits/s", note=note),
        Figure(f"{db}.step_readonly", per_second(r), "steps/s", per_second(f), r / f,
               f"ratio <= {TARGET}", r / f <= TARGET),
        Figure(f"{db}.step_mutating", per_second(m), "steps/s", per_second(2 * f),
               m / (2 * f), f"ratio <= {TARGET}", m / (2 * f) <= TARGET),
        Figure(f"{db}.step_readonly_in_store_append", append_s * 1000, "ms/step", f * 1000,
               append_s / f, note=f"time inside store.append ({appends_per_step:.2f} "
               "appends/step) against one floor commit"),
        Figure(f"{db}.step_readonly_outside_store", outside * 1000, "ms/step", f * 1000,
               outside / f, note="engine work per step outside store.append (same run), "
               "against one floor commit"),
    ]
    return figures


def _split(store: Any, n: int) -> tuple[float, float, float]:
    """Per read-only step: seconds inside ``store.append``, appends, and seconds in all."""
    timed = TimedStore(store)
    flow, tool = loop_flow(mutating=False)
    total = steps_seconds(timed, flow, tool, n)
    return timed.append_seconds / n, timed.appends / n, total


def bench_sqlite(*, steps: int = 2000, reps: int = 3) -> list[Figure]:
    """Floor and step throughput on SQLite files in a temporary directory."""
    with sqlite_dir() as d:
        floor = SQLiteFloor(os.path.join(d, "floor.db"))
        store = connect(f"sqlite:///{d}/underway.db")
        try:
            ro_flow, ro_tool = loop_flow(mutating=False)
            mut_flow, mut_tool = loop_flow(mutating=True)
            floor.seconds_per_commit(300)
            steps_seconds(store, ro_flow, ro_tool, 300)
            steps_seconds(store, mut_flow, mut_tool, 150)
            fl, ro, mu = [], [], []
            for _ in range(reps):
                fl.append(floor.seconds_per_commit(steps))
                ro.append(steps_seconds(store, ro_flow, ro_tool, steps))
                mu.append(steps_seconds(store, mut_flow, mut_tool, steps))
            split = _split(store, steps)
        finally:
            store.close()
            floor.close()
    return _figures("sqlite", fl, ro, mu, split, "WAL, synchronous=FULL, file on local disk")


def bench_postgres(*, steps: int = 1000, reps: int = 3) -> list[Figure]:
    """Floor and step throughput on a fresh PostgreSQL schema."""
    missing = pg_store_missing()
    sync = server_synchronous_commit()
    note = f"synchronous_commit={sync} (store sessions), on (floor)"
    with pg_schema() as (schema, url):
        floor = PostgresFloor(schema)
        try:
            floor.seconds_per_commit(200)
            if missing:
                fl = [floor.seconds_per_commit(steps) for _ in range(reps)]
                return [Figure("postgres.floor_1", per_second(median(fl)), "commits/s",
                               note=f"{note}; step figures skipped: {missing}")]
            store = connect(url)
            try:
                ro_flow, ro_tool = loop_flow(mutating=False)
                mut_flow, mut_tool = loop_flow(mutating=True)
                steps_seconds(store, ro_flow, ro_tool, 200)
                steps_seconds(store, mut_flow, mut_tool, 100)
                fl, ro, mu = [], [], []
                for _ in range(reps):
                    fl.append(floor.seconds_per_commit(steps))
                    ro.append(steps_seconds(store, ro_flow, ro_tool, steps))
                    mu.append(steps_seconds(store, mut_flow, mut_tool, steps))
                split = _split(store, steps)
            finally:
                store.close()
        finally:
            floor.close()
    return _figures("postgres", fl, ro, mu, split, note)
