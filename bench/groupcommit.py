"""Group commit: one engine with 100 runs in flight, against the single-commit floor.

One engine activates 100 runs at once, each a loop of steps that call one read-only no-op
tool (the shape of ``throughput.py``'s ``step_readonly``); with group commit the steps
that end while a transaction is being written go together in the next one. The figure is
steps per second over the activations (claims excluded); its baseline is the floor's
commits per second measured in the same run on the same database, so ``ratio`` =
steps/s ÷ floor commits/s (higher is better: how many durable steps one fsync's time buys).
The same shape with ``group_commit=False`` is measured alongside, interleaved, as the
figure without group commit.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir
from throughput import TENANT, PostgresFloor, SQLiteFloor, loop_flow
from underway.store import connect

RUNS = 100
TARGETS = {"sqlite": 3.0, "postgres": 5.0}
"""Steps/s ÷ floor commits/s the issue asks of group commit."""


def in_flight_steps_per_second(store: Any, runs: int, steps: int, *, grouped: bool) -> float:
    """Steps per second of ``runs`` activations driven together by one engine."""
    flow, tool = loop_flow(mutating=False)
    engine = uw.Engine(store, flows=[flow], tools=[tool], group_commit=grouped)
    ids = [engine.start(flow, {"n": steps}, tenant_id=TENANT)[0] for _ in range(runs)]
    leases = engine.claim(tenant_id=TENANT, limit=runs)
    if len(leases) != runs:
        raise RuntimeError(f"claimed {len(leases)} of {runs} runs")

    async def together() -> list[uw.RunState]:
        return await asyncio.gather(*(engine.activate(lease) for lease in leases))

    began = time.perf_counter()
    states = asyncio.run(together())
    elapsed = time.perf_counter() - began
    if sorted(s.run_id for s in states) != sorted(ids) or any(
        s.status != "completed" for s in states
    ):
        raise RuntimeError("a benchmark run did not complete")
    return runs * steps / elapsed


def _figures(db: str, floor: list[float], on: list[float], off: list[float],
             note: str) -> list[Figure]:
    floor_rate = 1.0 / median(floor)
    target = TARGETS[db]
    figures = []
    for name, rates in ((f"{db}.group_commit_100_in_flight", on),
                        (f"{db}.group_commit_off_100_in_flight", off)):
        rate = median(rates)
        ratio = rate / floor_rate
        figures.append(Figure(
            name, rate, "steps/s", baseline=floor_rate, ratio=ratio,
            target=f">= {target} x floor commits/s" if name.endswith(".group_commit_100_in_flight")
            else "diagnostic (group commit off)",
            ok=ratio >= target if "_off_" not in name else None, note=note,
        ))
    return figures


def _repetitions(floor: Any, store: Any, commits: int, steps: int, reps: int
                 ) -> tuple[list[float], list[float], list[float]]:
    """Floor, group commit on and off, warmed up and then interleaved ``reps`` times."""
    floor.seconds_per_commit(commits // 4)
    in_flight_steps_per_second(store, RUNS, 3, grouped=True)
    fl, on, off = [], [], []
    for _ in range(reps):
        fl.append(floor.seconds_per_commit(commits))
        on.append(in_flight_steps_per_second(store, RUNS, steps, grouped=True))
        off.append(in_flight_steps_per_second(store, RUNS, steps, grouped=False))
    return fl, on, off


def bench_sqlite(*, steps: int = 20, reps: int = 3) -> list[Figure]:
    """100 runs in flight on a SQLite file, group commit on and off, and the floor."""
    with sqlite_dir() as d:
        floor = SQLiteFloor(os.path.join(d, "floor.db"))
        store = connect(f"sqlite:///{d}/underway.db")
        try:
            fl, on, off = _repetitions(floor, store, 1000, steps, reps)
        finally:
            store.close()
            floor.close()
    return _figures("sqlite", fl, on, off, "WAL, synchronous=FULL")


def bench_postgres(*, steps: int = 20, reps: int = 3) -> list[Figure]:
    """100 runs in flight on a fresh PostgreSQL schema, group commit on and off."""
    if pg_store_missing():
        return []
    with pg_schema() as (schema, url):
        floor = PostgresFloor(schema)
        store = connect(url)
        try:
            fl, on, off = _repetitions(floor, store, 500, steps, reps)
        finally:
            store.close()
            floor.close()
    return _figures("postgres", fl, on, off, "synchronous_commit=on")
