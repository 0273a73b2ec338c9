"""Many short runs started and run by one process: the cost of starting a run, against the
raw commit floor of the same database (``throughput.py``'s floor classes).

100 runs of 10 steps each (a read-only no-op tool per step, one commit a step), one after
the other, in one process, two ways:

* start + claim: ``Engine.start`` commits the run, ``Engine.claim`` leases it in a second
  commit, the activation reads back the run row, its journal and its inbox;
* eager start: ``Engine.start_leased`` creates and leases the run in one commit and the
  activation starts from what the start wrote (:mod:`underway.engine._eager`).

``ratio`` is time per step over one floor commit, the start's cost spread over the run's
ten steps: the goal is at most 1.5.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import underway as uw
from common import Figure, median, per_second, pg_schema, pg_store_missing, sqlite_dir
from throughput import TARGET, PostgresFloor, SQLiteFloor, loop_flow
from underway.store import connect

TENANT = "default"
RUNS = 100
STEPS = 10


class CountingStore:
    """Wraps a store and counts the calls made to each of its methods, and the seconds
    spent in those that are not ``append`` (a run's start, claim and load)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self.starting = 0.0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            began = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                if name != "append":
                    self.starting += time.perf_counter() - began

        return counted


def _check(state: uw.RunState) -> None:
    if state.status != "completed" or state.steps_completed != STEPS:
        raise RuntimeError(f"benchmark run ended {state.status} after {state.steps_completed}")


async def _claimed(engine: uw.Engine, flow: uw.Flow[Any, Any], runs: int) -> None:
    for _ in range(runs):
        run_id, _ = engine.start(flow, {"n": STEPS}, tenant_id=TENANT, eager=False)
        [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
        _check(await engine.activate(lease))


async def _eager(engine: uw.Engine, flow: uw.Flow[Any, Any], runs: int) -> None:
    for _ in range(runs):
        start = engine.start_leased(engine.prepare_start(flow, {"n": STEPS}, tenant_id=TENANT))
        assert start.lease is not None
        _check(await engine.activate(start.lease, start=start))


Way = Callable[[uw.Engine, uw.Flow[Any, Any], int], Any]


def seconds_per_step(store: Any, way: Way, runs: int = RUNS) -> float:
    """Seconds per step of ``runs`` runs started and run one after the other ``way``."""
    flow, tool = loop_flow(mutating=False)
    engine = uw.Engine(store, flows=[flow], tools=[tool])
    began = time.perf_counter()
    asyncio.run(way(engine, flow, runs))
    return (time.perf_counter() - began) / (runs * STEPS)


def calls_per_run(store: Any, way: Way) -> tuple[Counter[str], float]:
    """The store calls one run costs ``way``, by method, and the seconds a run spends in
    the store outside its steps' appends (its start, claim and load); over :data:`RUNS`
    runs."""
    counting = CountingStore(store)
    seconds_per_step(counting, way)
    return Counter({k: v // RUNS for k, v in counting.calls.items()}), counting.starting / RUNS


def _figures(db: str, floor: list[float], claimed: list[float], eager: list[float],
             calls: tuple[tuple[Counter[str], float], tuple[Counter[str], float]],
             note: str) -> list[Figure]:
    f, c, e = median(floor), median(claimed), median(eager)
    (before, before_s), (after, after_s) = calls
    return [
        Figure(f"{db}.runs_100x10_start_claim", per_second(c), "steps/s", per_second(f),
               c / f, f"ratio <= {TARGET}", c / f <= TARGET,
               f"start, claim, activate; {note}"),
        Figure(f"{db}.runs_100x10_eager_start", per_second(e), "steps/s", per_second(f),
               e / f, f"ratio <= {TARGET}", e / f <= TARGET,
               f"eager start, activate; {note}"),
        Figure(f"{db}.runs_100x10_eager_vs_claim", e * 1000, "ms/step", c * 1000,
               median([x / y for x, y in zip(eager, claimed, strict=True)]),
               note="time per step with eager start against start + claim: the median of "
                    "the repetitions' paired ratios (each pair run back to back)"),
        Figure(f"{db}.runs_100x10_store_calls_per_run", sum(after.values()), "calls",
               sum(before.values()), sum(after.values()) / sum(before.values()),
               note="store calls per run, eager " + _calls(after) + "; start + claim "
                    + _calls(before)),
        Figure(f"{db}.runs_100x10_start_ms_per_run", after_s * 1000, "ms/run",
               before_s * 1000, after_s / before_s,
               note="a run's time in the store outside its steps' appends (start, claim, "
                    "load), eager against start + claim"),
    ]


def _calls(calls: Counter[str]) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in sorted(calls.items())) + ")"


def _measure(store: Any, floor: Any, reps: int) -> tuple[list[float], list[float], list[float]]:
    floor.seconds_per_commit(200)
    seconds_per_step(store, _claimed, runs=10)
    seconds_per_step(store, _eager, runs=10)
    fl: list[float] = []
    claimed: list[float] = []
    eager: list[float] = []
    for rep in range(reps):
        # Interleaved, each way first every other time, so that drift in the machine's
        # load hits every figure alike.
        fl.append(floor.seconds_per_commit(RUNS * STEPS))
        if rep % 2:
            eager.append(seconds_per_step(store, _eager))
            claimed.append(seconds_per_step(store, _claimed))
        else:
            claimed.append(seconds_per_step(store, _claimed))
            eager.append(seconds_per_step(store, _eager))
    return fl, claimed, eager


def bench_sqlite(*, reps: int = 7) -> list[Figure]:
    """100 runs of 10 steps on SQLite, started and claimed or started eagerly."""
    with sqlite_dir() as d:
        floor = SQLiteFloor(os.path.join(d, "floor.db"))
        store = connect(f"sqlite:///{d}/underway.db")
        try:
            fl, claimed, eager = _measure(store, floor, reps)
            calls = (calls_per_run(store, _claimed), calls_per_run(store, _eager))
        finally:
            store.close()
            floor.close()
    return _figures("sqlite", fl, claimed, eager, calls,
                    "WAL, synchronous=FULL, file on local disk")


def bench_postgres(*, reps: int = 7) -> list[Figure]:
    """100 runs of 10 steps on a fresh PostgreSQL schema, claimed or started eagerly."""
    missing = pg_store_missing()
    if missing:
        return [Figure("postgres.runs_100x10_eager_start", 0.0, "steps/s",
                       note=f"skipped: {missing}")]
    with pg_schema() as (schema, url):
        floor = PostgresFloor(schema)
        store = connect(url)
        try:
            fl, claimed, eager = _measure(store, floor, reps)
            calls = (calls_per_run(store, _claimed), calls_per_run(store, _eager))
        finally:
            store.close()
            floor.close()
    return _figures("postgres", fl, claimed, eager, calls, "synchronous_commit=on")
