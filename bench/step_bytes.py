"""Bytes a durable step leaves in the database, against a table holding just its result.

A step is driven as production drives it — :meth:`~underway.Engine.claim` +
:meth:`~underway.Engine.activate` of a flow whose step calls one read-only tool returning
the peers benchmark's ~200-byte dict (``peer_workers/protocol.py``) and goes to itself — and
costs whatever the database grows by: the step's events with their hashes and key columns,
the run row, checkpoints, and every index on them.

* SQLite: the pages in use (``page_count - freelist_count``, times the page size) as a
  reader sees them, the write-ahead log included (as ``peers_measure.sqlite_bytes``);
* PostgreSQL: ``pg_total_relation_size`` (table, indexes, TOAST) of every table of the
  benchmark's schema after the runs, against before.

The floor is the same measurement of a table holding one row per step: an integer key and
the step's 200-byte result, each row committed on its own (the least a durable step could
store). ``ratio`` = bytes per step over floor bytes per step.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import uuid
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_base_url, pg_schema, pg_store_missing, sqlite_dir
from peer_workers.protocol import step_result
from peers_measure import sqlite_bytes
from underway.store import connect

TENANT = "default"
RUNS = 4
STEPS = 500
REPS = 3
"""Each figure is the median of this many measurements, each in a fresh database (how a
PostgreSQL table grows depends on when autovacuum passes)."""
TARGET_BYTES = 600
"""The goal: at most this many bytes per step (the issue's figure; DBOS stores ~520-660)."""


class LoopState(BaseModel):
    """How many steps have run."""

    i: int = 0


class LoopInput(BaseModel):
    """Which run, and how many steps."""

    run: str
    n: int


class StepArgs(BaseModel):
    """The step's run and number."""

    run: str
    i: int


async def produce(args: StepArgs) -> dict[str, Any]:
    """The step's work: its ~200-byte result, journaled with the step."""
    return step_result(args.run, args.i)


step_tool: uw.Tool = uw.tool(produce, name="produce", read_only=True)
flow: uw.Flow[LoopState, LoopInput] = uw.Flow("bytes_loop", state=LoopState, input=LoopInput)


@flow.step
async def tick(ctx: uw.RunContext[LoopState, LoopInput]) -> Any:
    await ctx.call(step_tool, {"run": ctx.input.run, "i": ctx.state.i})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)


def run_steps(engine: uw.Engine, runs: int, steps: int) -> None:
    """``runs`` runs of ``steps`` steps, one after another, each to its end."""
    for _ in range(runs):
        run_id = f"bytes-{uuid.uuid4().hex}"
        engine.start(flow, {"run": run_id, "n": steps}, run_id=run_id, tenant_id=TENANT)
        [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
        state = asyncio.run(engine.activate(lease))
        if state.status != "completed" or state.steps_completed != steps:
            raise RuntimeError(f"run {run_id} ended {state.status} "
                               f"after {state.steps_completed} steps")


def results(steps: int) -> list[bytes]:
    """The results the floor stores: one a step, as compact JSON (~200 bytes each)."""
    run_id = f"bytes-{uuid.uuid4().hex}"
    return [json.dumps(step_result(run_id, i), separators=(",", ":")).encode()
            for i in range(steps)]


def _figures(db: str, grown: float, floor: int, payload: float, steps: int,
             note: str) -> list[Figure]:
    per, floor_per = grown / steps, floor / steps
    return [
        Figure(f"{db}.bytes_per_step", per, "bytes", floor_per, per / floor_per,
               f"<= {TARGET_BYTES} B", per <= TARGET_BYTES, note=note),
        Figure(f"{db}.event_payload_bytes_per_step", payload / steps, "bytes", floor_per,
               payload / steps / floor_per,
               note="the events' stored payloads and hashes alone (no keys, rows or index)"),
    ]


# -- SQLite ---------------------------------------------------------------------------------
def _sqlite_payload(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT coalesce(sum(length(payload) + length(hash)), 0) FROM events").fetchone()
    finally:
        conn.close()
    return int(row[0])


def _sqlite_floor(path: str, rows: list[bytes]) -> int:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
        before = sqlite_bytes(path)
        for row in rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO floor (payload) VALUES (?)", (row,))
            conn.execute("COMMIT")
        return sqlite_bytes(path) - before
    finally:
        conn.close()


def _sqlite_run(d: str, runs: int, steps: int) -> tuple[int, int]:
    """(bytes the database grew by, bytes of event payloads and hashes) over the runs."""
    path = os.path.join(d, "underway.db")
    store = connect(f"sqlite:///{path}")
    try:
        engine = uw.Engine(store, flows=[flow], tools=[step_tool])
        run_steps(engine, 1, 10)  # what a first run writes once (flow rows, ...)
        before, payload_before = sqlite_bytes(path), _sqlite_payload(path)
        run_steps(engine, runs, steps)
        return sqlite_bytes(path) - before, _sqlite_payload(path) - payload_before
    finally:
        store.close()


def bench_sqlite(*, runs: int = RUNS, steps: int = STEPS, reps: int = REPS) -> list[Figure]:
    """Bytes per step on a SQLite file, against the floor's on another."""
    total = runs * steps
    measured = []
    for _ in range(reps):
        with sqlite_dir() as d:
            measured.append(_sqlite_run(d, runs, steps))
    with sqlite_dir() as d:
        floor = _sqlite_floor(os.path.join(d, "floor.db"), results(total))
    grown = median([float(g) for g, _ in measured])
    payload = median([float(p) for _, p in measured])
    return _figures("sqlite", grown, floor, payload, total,
                    f"{runs} runs of {steps} steps, median of {reps}; pages in use, WAL "
                    "included")


# -- PostgreSQL -----------------------------------------------------------------------------
def _pg_sizes(conn: Any, schema: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'm', 'p')", (schema,)).fetchall()
    return {str(name): int(size) for name, size in rows}


def _pg_payload(conn: Any, schema: str) -> int:
    row = conn.execute(
        f'SELECT coalesce(sum(octet_length(payload) + octet_length(hash)), 0) '
        f'FROM "{schema}".events').fetchone()
    return int(row[0])


def _pg_run(conn: Any, schema: str, url: str, runs: int, steps: int) -> tuple[int, int]:
    """(bytes the schema's tables grew by, bytes of event payloads and hashes) over the
    runs."""
    store = connect(url)
    try:
        engine = uw.Engine(store, flows=[flow], tools=[step_tool])
        run_steps(engine, 1, 10)
        before, payload_before = _pg_sizes(conn, schema), _pg_payload(conn, schema)
        run_steps(engine, runs, steps)
        after = _pg_sizes(conn, schema)
        return (sum(after.values()) - sum(before.values()),
                _pg_payload(conn, schema) - payload_before)
    finally:
        store.close()


def bench_postgres(*, runs: int = RUNS, steps: int = STEPS, reps: int = REPS) -> list[Figure]:
    """Bytes per step in fresh PostgreSQL schemas, against a floor table."""
    import psycopg

    if missing := pg_store_missing():
        return [Figure("postgres.bytes_per_step", 0.0, "bytes", note=f"skipped: {missing}")]
    total = runs * steps
    measured = []
    with psycopg.connect(pg_base_url(), autocommit=True) as conn:
        for _ in range(reps):
            with pg_schema() as (schema, url):
                measured.append(_pg_run(conn, schema, url, runs, steps))
    grown = median([float(g) for g, _ in measured])
    payload = median([float(p) for _, p in measured])
    with pg_schema() as (schema, _), psycopg.connect(pg_base_url(), autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{schema}".floor '
                     "(id BIGSERIAL PRIMARY KEY, payload BYTEA NOT NULL)")
        floor_before = _pg_sizes(conn, schema)["floor"]
        for row in results(total):
            conn.execute(f'INSERT INTO "{schema}".floor (payload) VALUES (%s)', (row,))
        floor = _pg_sizes(conn, schema)["floor"] - floor_before
    return _figures("postgres", grown, floor, payload, total,
                    f"{runs} runs of {steps} steps, median of {reps}; tables, indexes and "
                    "TOAST of the schema")
