"""Group commit: one engine with 100 runs in flight, against the single-commit floor.

One engine activates 100 runs at once, each a loop of steps that call one read-only no-op
tool (the shape of ``throughput.py``'s ``step_readonly``); with group commit the steps
that end while a transaction is being written go together in the next one. The figure is
steps per second over the activations (claims excluded); its baseline is the floor's
commits per second measured in the same run on the same database, so ``ratio`` =
steps/s ÷ floor commits/s (higher is better: how many durable steps one fsync's time buys).
The same shape with ``group_commit=False`` is measured alongside, interleaved, as the
figure without group commit.

Whether the worker is bound by its CPU or by its commits: the event loop's thread CPU
time per step is measured in the same activations (the engine's own work, which runs on
one core), and ``cpu_bound`` = steps/s ÷ (1 / that CPU per step), the share of the time the
loop spent working (issue 28: at least 0.8). A machine loaded by other work makes the
loop's thread wait for a core too; that wait (Linux ``/proc/thread-self/schedstat``: time
runnable but not running) is taken out of the time, so the share falls only when the loop
waits for something else: its commits, or the GIL held by the store's I/O threads.

With worker processes (PostgreSQL): 1 and 2 ``underway worker`` processes with 100 runs in
flight between them (``--concurrency`` 100 and 50 each), steps/s against floor commits/s of
the same run (issue 28: 2 processes at least 2.5).
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
CPU_BOUND = 0.8
"""Steps/s ÷ (1 / the loop's CPU per step) issue 28 asks for: the worker bound by its CPU."""
WORKERS_TARGET = 2.5
"""Steps/s of 2 PostgreSQL worker processes ÷ floor commits/s issue 28 asks for."""
WORKER_STEPS = 40
GROUP_SIZES: list[float] = []
"""Mean batches per transaction of each grouped measurement (for the notes)."""


def in_flight_steps_per_second(store: Any, runs: int, steps: int, *, grouped: bool) -> float:
    """Steps per second of ``runs`` activations driven together by one engine."""
    return in_flight(store, runs, steps, grouped=grouped)[0]


def _schedstat() -> tuple[float, float]:
    """This thread's seconds on a CPU and seconds runnable waiting for one (0, 0 where
    Linux's schedstat is missing)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            on_cpu, waiting, _ = f.read().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def in_flight(store: Any, runs: int, steps: int, *, grouped: bool
              ) -> tuple[float, float, float]:
    """Steps per second of ``runs`` activations driven together by one engine, the event
    loop thread's CPU seconds per step, and the share of the time the loop thread was
    running when it could have been (time waiting for a core, on a loaded machine, left
    out)."""
    flow, tool = loop_flow(mutating=False)
    engine = uw.Engine(store, flows=[flow], tools=[tool], group_commit=grouped)
    ids = [engine.start(flow, {"n": steps}, tenant_id=TENANT)[0] for _ in range(runs)]
    leases = engine.claim(tenant_id=TENANT, limit=runs)
    if len(leases) != runs:
        raise RuntimeError(f"claimed {len(leases)} of {runs} runs")

    async def together() -> tuple[list[uw.RunState], float, float]:
        cpu, (_, waited), t0 = time.thread_time(), _schedstat(), time.perf_counter()
        states = await asyncio.gather(*(engine.activate(lease) for lease in leases))
        used, (_, waited_end) = time.thread_time() - cpu, _schedstat()
        could_run = time.perf_counter() - t0 - (waited_end - waited)
        return states, used, used / could_run if could_run > 0 else 0.0

    began = time.perf_counter()
    states, loop_cpu, busy = asyncio.run(together())
    elapsed = time.perf_counter() - began
    if sorted(s.run_id for s in states) != sorted(ids) or any(
        s.status != "completed" for s in states
    ):
        raise RuntimeError("a benchmark run did not complete")
    if engine.committer is not None and engine.committer.groups:
        GROUP_SIZES.append(engine.committer.batches / engine.committer.groups)
    return runs * steps / elapsed, loop_cpu / (runs * steps), busy


def _figures(db: str, floor: list[float], on: list[float], off: list[float],
             note: str, cpu: list[float], busy: list[float]) -> list[Figure]:
    floor_rate = 1.0 / median(floor)
    if GROUP_SIZES:
        note = f"{note}; {median(GROUP_SIZES):.1f} steps per transaction (group commit on)"
        GROUP_SIZES.clear()
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
    rate, per_step, bound = median(on), median(cpu), median(busy)
    figures.append(Figure(
        f"{db}.group_commit_cpu_bound", bound / per_step, "steps/s", 1.0 / per_step,
        bound, f">= {CPU_BOUND} x 1 / loop CPU per step", bound >= CPU_BOUND,
        note=f"group commit on, 100 in flight; loop thread CPU {per_step * 1e6:.0f} us/step, "
             f"busy {rate * per_step:.2f} of the wall time, {bound:.2f} of the time it could "
             "run (value: steps/s with the wait for a core left out; baseline: the rate "
             "that CPU allows)"))
    return figures


def _repetitions(floor: Any, store: Any, commits: int, steps: int, reps: int
                 ) -> tuple[list[float], list[float], list[float], list[float], list[float]]:
    """Floor, group commit on and off, warmed up and then interleaved ``reps`` times; and
    the loop's CPU per step with group commit on."""
    floor.seconds_per_commit(commits // 4)
    in_flight_steps_per_second(store, RUNS, 3, grouped=True)
    fl, on, off, cpu, busy = [], [], [], [], []
    for _ in range(reps):
        fl.append(floor.seconds_per_commit(commits))
        rate, per_step, share = in_flight(store, RUNS, steps, grouped=True)
        on.append(rate)
        cpu.append(per_step)
        busy.append(share)
        off.append(in_flight_steps_per_second(store, RUNS, steps, grouped=False))
    return fl, on, off, cpu, busy


def bench_sqlite(*, steps: int = 20, reps: int = 3) -> list[Figure]:
    """100 runs in flight on a SQLite file, group commit on and off, and the floor."""
    with sqlite_dir() as d:
        floor = SQLiteFloor(os.path.join(d, "floor.db"))
        store = connect(f"sqlite:///{d}/underway.db")
        try:
            fl, on, off, cpu, busy = _repetitions(floor, store, 1000, steps, reps)
        finally:
            store.close()
            floor.close()
    return _figures("sqlite", fl, on, off, "WAL, synchronous=FULL", cpu, busy)


def bench_postgres(*, steps: int = 20, reps: int = 3) -> list[Figure]:
    """100 runs in flight on a fresh PostgreSQL schema, group commit on and off."""
    if pg_store_missing():
        return []
    with pg_schema() as (schema, url):
        floor = PostgresFloor(schema)
        store = connect(url)
        try:
            fl, on, off, cpu, busy = _repetitions(floor, store, 500, steps, reps)
        finally:
            store.close()
            floor.close()
    return _figures("postgres", fl, on, off, "synchronous_commit=on", cpu, busy)


def _workers_steps_per_second(n: int) -> float:
    """Steps/s of ``n`` worker processes sharing :data:`RUNS` runs in flight (as
    :func:`workers.steps_per_second`, with a start margin that allows a loaded machine)."""
    import workers

    with workers.fresh_db("postgres") as url, workers.Workers(
            url, n, "--concurrency", str(RUNS // n)):
        store = connect(url, migrate=False)
        try:
            engine = uw.Engine(store, flows=workers.FLOWS)
            ids, at = workers.start_together(engine, workers.noop_loop,
                                             [{"n": WORKER_STEPS}] * RUNS, margin=5.0)
            last = workers.wait_until_final(store, ids)
        finally:
            store.close()
    return RUNS * WORKER_STEPS / (last - at)


def bench_postgres_workers(*, reps: int = 2) -> list[Figure]:
    """1 and 2 worker processes with 100 runs in flight between them, against the floor
    measured in the same run (interleaved)."""
    if pg_store_missing():
        return []
    with pg_schema() as (schema, _):
        floor = PostgresFloor(schema)
        try:
            floor.seconds_per_commit(100)
            fl: list[float] = []
            rates: dict[int, list[float]] = {1: [], 2: []}
            for _ in range(reps):
                for n in (1, 2):
                    fl.append(floor.seconds_per_commit(500))
                    rates[n].append(_workers_steps_per_second(n))
        finally:
            floor.close()
    floor_rate = 1.0 / median(fl)
    figures = []
    for n, got in rates.items():
        rate = median(got)
        figures.append(Figure(
            f"postgres.group_commit_workers_{n}_100_in_flight", rate, "steps/s", floor_rate,
            rate / floor_rate, f">= {WORKERS_TARGET} x floor commits/s" if n == 2 else
            "diagnostic (one process)", rate / floor_rate >= WORKERS_TARGET if n == 2 else None,
            note=f"{n} underway worker process(es), --concurrency {RUNS // n} each, {RUNS} runs "
                 f"x {WORKER_STEPS} steps; synchronous_commit=on"))
    return figures
