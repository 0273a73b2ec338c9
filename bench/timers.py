"""Timers due at 1,000 a second: how long from a timer's due time to its run's next step.

Real ``underway worker`` processes (``WORKERS`` of them) serve a fresh PostgreSQL schema.
Runs of :data:`timer_at` sleep on a durable timer until an instant given in their input,
then finish. Their latency is the journal's: a timer's due time (``TimerSet.wake_at``) to
the ``StepStarted`` of the step after it.

* the **baseline**, in the same run: ``FLOOR`` timers one at a time, ``FLOOR_GAP_S``
  apart: the floor of this machine, its load and the workers' wake-up;
* the **figure**: ``RATE`` timers a second for ``SECONDS`` seconds, each due
  ``1 / RATE`` after the one before.

Every run is started, and goes to sleep, before the first timer is due; a burst of starts
is not what is measured. The target is a p99 of at most 100 ms at 1,000 a second.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, pg_schema, pg_store_missing
from underway import events as ev
from underway.store import connect
from workers import TENANT, Workers, percentile

RATE = int(os.environ.get("UNDERWAY_BENCH_TIMER_RATE", "1000"))
"""Timers due a second."""
SECONDS = float(os.environ.get("UNDERWAY_BENCH_TIMER_SECONDS", "5"))
"""For how long they come due."""
FLOOR = 100
FLOOR_GAP_S = 0.02
WORKERS = 2
CONCURRENCY = 100
TARGET_P99_MS = 100.0
ARMED_TIMEOUT_S = 120.0
DONE_TIMEOUT_S = 180.0
MARGIN_S = 1.0
"""Seconds between the floor's last timer and the first timer of the load."""
WORKERS_UP_S = 15.0
"""Seconds allowed for the worker processes to start (a loaded machine is slow)."""


class At(BaseModel):
    """When the run's timer is due (epoch seconds)."""

    at: float


class Nothing(BaseModel):
    """No state."""


timer_at: uw.Flow[Nothing, At] = uw.Flow("bench_timer_at", state=Nothing, input=At)


@timer_at.step(start=True)
async def arm(ctx: uw.RunContext[Nothing, At]) -> Any:
    return ctx.sleep(max(0.0, ctx.input.at - ctx.now().timestamp()), then=woke)


@timer_at.step
async def woke(ctx: uw.RunContext[Nothing, At]) -> Any:
    return ctx.done(None)


def app() -> list[uw.Flow[Any, Any]]:
    """What ``underway worker --app timers:app`` loads."""
    return [timer_at]


def _count(store: Any, status: str) -> int:
    return sum(n for t, s, n in store.run_counts() if t == TENANT and s == status)


def _wait_for(store: Any, status: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (have := _count(store, status)) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{have} of {n} runs {status} after {timeout:.0f}s")
        time.sleep(0.1)


def _wakes(engine: uw.Engine, run_ids: list[str]) -> list[tuple[float, float]]:
    """(due, woke) of each run: its timer's instant and its next step's start."""
    out = []
    for rid in run_ids:
        due = started = None
        for r in engine.journal.history(TENANT, rid):
            if isinstance(r.event, ev.TimerSet):
                due = r.event.wake_at
            elif isinstance(r.event, ev.StepStarted) and r.event.step == "woke":
                started = r.at
        if due is None or started is None:
            raise RuntimeError(f"run {rid} has no timer or never woke")
        out.append((due, started))
    return out


def measure(url: str, *, rate: int = RATE, seconds: float = SECONDS
            ) -> dict[str, list[tuple[float, float]]]:
    """(due, woke) of the floor's timers and of the timers at ``rate``.

    The runs are started before any worker serves, with their timers' instants far enough
    ahead for the workers to start and put every run to sleep first (3 ms a run, and
    ``WORKERS_UP_S``); it raises if they were not all asleep in time."""
    store = connect(url, migrate=False)
    try:
        engine = uw.Engine(store, flows=[timer_at])
        n = int(rate * seconds)
        t0 = time.time() + (FLOOR + n) * 0.003 + WORKERS_UP_S
        load_t0 = t0 + FLOOR * FLOOR_GAP_S + MARGIN_S
        floor_ids = [engine.start(timer_at, {"at": t0 + i * FLOOR_GAP_S})[0]
                     for i in range(FLOOR)]
        load_ids = [engine.start(timer_at, {"at": load_t0 + i / rate})[0] for i in range(n)]
        with Workers(url, WORKERS, "--app", "timers:app", "--concurrency", str(CONCURRENCY)):
            _wait_for(store, "waiting", FLOOR + n, ARMED_TIMEOUT_S)
            if time.time() > t0:
                raise RuntimeError("the runs were not all asleep before the first timer")
            _wait_for(store, "completed", FLOOR + n, DONE_TIMEOUT_S)
        return {"floor": _wakes(engine, floor_ids), "load": _wakes(engine, load_ids)}
    finally:
        store.close()


def bench_postgres() -> list[Figure]:
    """Timer latency at RATE a second, against the floor, on PostgreSQL."""
    if pg_store_missing():
        return []
    with pg_schema() as (_, url):
        connect(url).close()
        got = measure(url)
    floor = [(w - d) * 1000 for d, w in got["floor"]]
    load = [(w - d) * 1000 for d, w in got["load"]]
    f50, f99 = percentile(floor, 0.5), percentile(floor, 0.99)
    l50, l99 = percentile(load, 0.5), percentile(load, 0.99)
    first_due = min(d for d, _ in got["load"])
    kept = len(load) / (max(w for _, w in got["load"]) - first_due)
    what = f"{RATE:,} timers a second for {SECONDS:g} s, {WORKERS} workers"
    return [
        Figure("postgres.timers_1000_per_s_p50", l50, "ms", f50, l50 / f50,
               note=f"{what}; baseline: {FLOOR} timers {FLOOR_GAP_S * 1000:.0f} ms apart"),
        Figure("postgres.timers_1000_per_s_p99", l99, "ms", f99, l99 / f99,
               f"value <= {TARGET_P99_MS:.0f} ms", l99 <= TARGET_P99_MS,
               note=f"due (TimerSet.wake_at) to the next step's StepStarted; max "
                    f"{max(load):.0f} ms"),
        Figure("postgres.timers_1000_per_s_woken", kept, "timers/s", float(RATE),
               kept / RATE, ">= 1.0", kept >= RATE * 0.98,
               note="timers woken a second, from the first due to the last wake; "
                    "baseline: the rate they came due"),
    ]


if __name__ == "__main__":
    for fig in bench_postgres():
        print(fig)
    sys.exit(0)
