"""Worker processes: throughput, wake-up latency and the memory of waiting runs.

Every figure is taken from real ``underway worker`` processes on a fresh database, and from
what they journal, not from timers inside the worker:

* **steps per second** with 1, 2 and 4 workers, for no-op steps (``--concurrency 16``: the
  database is the limit) and for steps whose tool awaits 100 ms (``--concurrency 100``:
  concurrency hides the latency; one worker's ideal is 100 / 0.1 s = 1,000 steps/s). Runs
  are created with a common ``start_at`` in the near future; the rate is the number of
  steps over the time from that instant to the last run's completion (its row's
  ``updated_at``);
* **wake-up latency**, p50 and p99: a timer's due time (``TimerSet.wake_at``) or the moment
  a signal was sent (carried in its payload) to the ``StepStarted`` of the step after it;
* **memory**: the resident set (``VmRSS``) of one worker once 10,000 runs (and, for the
  baseline, 1,000) wait on day-long timers — waiting runs hold nothing, so the ratio is ~1.

This module is also the workers' application (``--app workers:app``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, pg_schema, pg_store_missing, sqlite_dir
from underway import events as ev
from underway.store import connect
from underway.store.base import FINAL

HERE = Path(__file__).parent
UNDERWAY = Path(sys.executable).with_name("underway")
TENANT = "default"
WORKER_COUNTS = (1, 2, 4)
TOOL_WAIT_S = 0.1
TARGET_STEPS_PER_S = 500.0
TARGET_WAKE_P99_MS = 100.0
SIGNAL_EVERY_S = 0.025
"""Signals are sent one at a time, this far apart, so none waits behind another."""
READY_TIMEOUT_S = 60.0
DONE_TIMEOUT_S = 120.0


# -- the application the workers run ------------------------------------------------------
class LoopInput(BaseModel):
    """How many steps to run."""

    n: int


class LoopState(BaseModel):
    """How many steps have run."""

    i: int = 0


class WakeInput(BaseModel):
    """How long to sleep before the step whose start is measured."""

    delay: float = 0.0


async def _nothing(args: Any) -> None:
    return None


async def _wait(args: Any) -> None:
    await asyncio.sleep(TOOL_WAIT_S)


noop = uw.tool(_nothing, name="bench_noop", mutating=False)
wait100 = uw.tool(_wait, name="bench_wait100", mutating=False)


def _loop(name: str, tool: uw.Tool) -> uw.Flow[LoopState, LoopInput]:
    flow: uw.Flow[LoopState, LoopInput] = uw.Flow(name, state=LoopState, input=LoopInput)

    @flow.step
    async def tick(ctx: uw.RunContext[LoopState, LoopInput]) -> Any:
        await ctx.call(tool, {})
        ctx.state.i += 1
        return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)

    return flow


noop_loop = _loop("bench_noop_loop", noop)
wait_loop = _loop("bench_wait_loop", wait100)

timer_wake: uw.Flow[LoopState, WakeInput] = uw.Flow("bench_timer", state=LoopState,
                                                    input=WakeInput)


@timer_wake.step(start=True)
async def arm_timer(ctx: uw.RunContext[LoopState, WakeInput]) -> Any:
    return ctx.sleep(ctx.input.delay, then=woke_by_timer)


@timer_wake.step
async def woke_by_timer(ctx: uw.RunContext[LoopState, WakeInput]) -> Any:
    return ctx.done(None)


signal_wake: uw.Flow[LoopState, WakeInput] = uw.Flow("bench_signal", state=LoopState,
                                                     input=WakeInput)


@signal_wake.step(start=True)
async def arm_signal(ctx: uw.RunContext[LoopState, WakeInput]) -> Any:
    return ctx.wait("go", then=woke_by_signal)


@signal_wake.step
async def woke_by_signal(ctx: uw.RunContext[LoopState, WakeInput]) -> Any:
    return ctx.done(None)


FLOWS: list[uw.Flow[Any, Any]] = [noop_loop, wait_loop, timer_wake, signal_wake]


def app() -> list[uw.Flow[Any, Any] | uw.Tool]:
    """What ``underway worker --app workers:app`` loads."""
    return [*FLOWS, noop, wait100]


# -- driving worker processes -------------------------------------------------------------
class Workers:
    """``n`` worker processes on ``url``; SIGTERMed (then killed) on exit."""

    def __init__(self, url: str, n: int, *args: str) -> None:
        self.logdir = tempfile.mkdtemp(prefix="underway-bench-workers-")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outs: list[Path] = []
        for i in range(n):
            out = Path(self.logdir) / f"worker-{i}.out"
            with out.open("wb") as fo, (Path(self.logdir) / f"worker-{i}.err").open("wb") as fe:
                self.procs.append(subprocess.Popen(
                    [str(UNDERWAY), "worker", "--db", url, "--app", "workers:app", *args],
                    stdout=fo, stderr=fe, env=env))
            self.outs.append(out)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for proc, out in zip(self.procs, self.outs, strict=True):
            while "ready" not in out.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = out.with_suffix(".err").read_text(errors="replace")[-3000:]
                    self.close()
                    raise RuntimeError(f"a worker did not start: {err}")
                time.sleep(0.01)

    def rss_kb(self, i: int = 0) -> int:
        """Resident set size of worker ``i`` in kB (Linux ``/proc``)."""
        for line in Path(f"/proc/{self.procs[i].pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS in /proc/<pid>/status")

    def close(self) -> None:
        """SIGTERM every worker; SIGKILL those still alive after 30 s."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for name in os.listdir(self.logdir):
            os.unlink(os.path.join(self.logdir, name))
        os.rmdir(self.logdir)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def fresh_db(db: str) -> Iterator[str]:
    """A migrated, empty database of kind ``db`` (``sqlite`` or ``postgres``): its URL."""
    if db == "sqlite":
        with sqlite_dir() as d:
            url = f"sqlite:///{d}/underway.db"
            connect(url).close()
            yield url
    else:
        with pg_schema() as (_, url):
            connect(url).close()
            yield url


def wait_until_final(store: Any, run_ids: list[str]) -> float:
    """Block until every run is final; return the latest ``updated_at`` among them."""
    deadline = time.monotonic() + DONE_TIMEOUT_S
    pending = set(run_ids)
    last = 0.0
    while pending:
        for rid in list(pending):
            row = store.get_run(TENANT, rid)
            if row is not None and row.status in FINAL:
                if row.status != "completed":
                    raise RuntimeError(f"benchmark run {rid} ended {row.status}: {row.error}")
                last = max(last, row.updated_at)
                pending.discard(rid)
        if pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} benchmark runs not done after "
                                   f"{DONE_TIMEOUT_S:.0f}s")
            time.sleep(0.05)
    return last


def start_together(engine: uw.Engine, flow: uw.Flow[Any, Any], inputs: list[Any],
                   margin: float = 1.0) -> tuple[list[str], float]:
    """Create runs that all become due at one instant a little ahead: (ids, that instant).
    The instant allows 5 ms per run created (a slow, shared machine needs that much)."""
    at = time.time() + margin + 0.005 * len(inputs)
    ids = [engine.start(flow, data, start_at=at)[0] for data in inputs]
    if time.time() >= at:
        raise RuntimeError("creating the runs took longer than the start margin")
    return ids, at


def steps_per_second(db: str, flow: uw.Flow[Any, Any], workers: int, runs: int, steps: int,
                     concurrency: int) -> float:
    """Steps per second of ``workers`` processes driving ``runs`` runs of ``steps`` steps."""
    with fresh_db(db) as url, Workers(url, workers, "--concurrency", str(concurrency)):
        store = connect(url, migrate=False)
        try:
            engine = uw.Engine(store, flows=FLOWS)
            ids, at = start_together(engine, flow, [{"n": steps}] * runs)
            last = wait_until_final(store, ids)
        finally:
            store.close()
    return runs * steps / (last - at)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


def step_started_at(engine: uw.Engine, run_id: str, step: str) -> float:
    """When the run's step ``step`` started, as journaled."""
    for r in engine.journal.history(TENANT, run_id):
        if isinstance(r.event, ev.StepStarted) and r.event.step == step:
            return r.at
    raise RuntimeError(f"run {run_id} never started step {step}")


def wake_latencies(db: str, runs: int) -> tuple[list[float], list[float]]:
    """Milliseconds from due timer to step start, and from signal sent to step start."""
    with fresh_db(db) as url, Workers(url, 1, "--concurrency", "100"):
        store = connect(url, migrate=False)
        try:
            engine = uw.Engine(store, flows=FLOWS)
            # Timers due one by one over two seconds, so none waits behind another.
            timer_ids, _ = start_together(
                engine, timer_wake, [{"delay": 0.5 + 2.0 * i / runs} for i in range(runs)])
            wait_until_final(store, timer_ids)
            timers = []
            for rid in timer_ids:
                due = next(r.event.wake_at for r in engine.journal.history(TENANT, rid)
                           if isinstance(r.event, ev.TimerSet))
                timers.append((step_started_at(engine, rid, "woke_by_timer") - due) * 1000)
            signal_ids, _ = start_together(engine, signal_wake, [{}] * runs)
            while any((row := store.get_run(TENANT, rid)) is None or row.status != "waiting"
                      for rid in signal_ids):
                time.sleep(0.05)
            sent = {}
            for rid in signal_ids:
                sent[rid] = time.time()
                engine.signal(rid, "go", {"sent": sent[rid]})
                time.sleep(SIGNAL_EVERY_S)
            wait_until_final(store, signal_ids)
            signals = [(step_started_at(engine, rid, "woke_by_signal") - sent[rid]) * 1000
                       for rid in signal_ids]
        finally:
            store.close()
    return timers, signals


def idle_rss_kb(db: str, runs: int) -> int:
    """Resident set of one worker after ``runs`` runs went to sleep on day-long timers."""
    with fresh_db(db) as url, Workers(url, 1, "--concurrency", "100") as w:
        store = connect(url, migrate=False)
        try:
            engine = uw.Engine(store, flows=FLOWS)
            ids = [engine.start(timer_wake, {"delay": 86_400.0})[0] for _ in range(runs)]
            deadline = time.monotonic() + DONE_TIMEOUT_S
            while len(store.list_runs(TENANT, status="waiting", limit=runs + 1)) < len(ids):
                if time.monotonic() > deadline:
                    raise RuntimeError("runs did not all go to sleep")
                time.sleep(0.2)
            time.sleep(1.0)
            return w.rss_kb()
        finally:
            store.close()


# -- the benchmark --------------------------------------------------------------------------
def bench_db(db: str, *, noop_runs: int = 64, noop_steps: int = 40, wait_runs: int = 400,
             wait_steps: int = 5, wake_runs: int = 200) -> list[Figure]:
    """Every worker figure for one database kind."""
    figures: list[Figure] = []
    for kind, flow, runs, steps, conc in (
        ("noop", noop_loop, noop_runs, noop_steps, 16),
        ("wait100ms", wait_loop, wait_runs, wait_steps, 100),
    ):
        rates = {n: steps_per_second(db, flow, n, runs, steps, conc) for n in WORKER_COUNTS}
        for n, rate in rates.items():
            name = f"{db}.workers_{kind}_{n}"
            if kind == "wait100ms" and n == 1:
                ideal = conc / TOOL_WAIT_S
                figures.append(Figure(
                    name, rate, "steps/s", ideal, rate / ideal,
                    f">= {TARGET_STEPS_PER_S:.0f} steps/s", rate >= TARGET_STEPS_PER_S,
                    note=f"one worker, --concurrency {conc}, tools awaiting 100 ms; "
                    f"baseline: the ideal {ideal:.0f} steps/s"))
            elif n == 1:
                figures.append(Figure(name, rate, "steps/s", note=(
                    f"{runs} runs x {steps} steps, --concurrency {conc} per worker")))
            else:
                figures.append(Figure(name, rate, "steps/s", rates[1], rate / rates[1],
                                      note=f"{n} workers; baseline: 1 worker"))
    timers, signals = wake_latencies(db, wake_runs)
    hear = ("LISTEN/NOTIFY" if db == "postgres" else
            "polling: every 50 ms while work keeps coming, backing off to --poll (1 s)")
    for what, values in (("timer", timers), ("signal", signals)):
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        how = ("timers due one by one over 2 s; the worker sleeps until the next is due"
               if what == "timer" else
               f"a signal every {SIGNAL_EVERY_S * 1000:.0f} ms; {hear}")
        figures.append(Figure(f"{db}.wake_{what}_p50", p50, "ms",
                              note=f"{len(values)} runs, one worker, {how}"))
        if db == "postgres":
            figures.append(Figure(f"{db}.wake_{what}_p99", p99, "ms", p50, p99 / p50,
                                  f"< {TARGET_WAKE_P99_MS:.0f} ms", p99 < TARGET_WAKE_P99_MS))
        else:
            figures.append(Figure(f"{db}.wake_{what}_p99", p99, "ms", p50, p99 / p50))
    small, large = idle_rss_kb(db, 1_000), idle_rss_kb(db, 10_000)
    figures.append(Figure(f"{db}.worker_rss_1k_waiting", small / 1024, "MiB", note=(
        "VmRSS of one worker once it has put 1,000 runs to sleep on day-long timers")))
    figures.append(Figure(f"{db}.worker_rss_10k_waiting", large / 1024, "MiB", small / 1024,
                          large / small, "ratio ~1 (flat)", large / small <= 1.25,
                          note="the same with 10,000 runs; baseline: 1,000 runs"))
    return figures


def bench_sqlite() -> list[Figure]:
    """Worker figures on SQLite."""
    return bench_db("sqlite")


def bench_postgres() -> list[Figure]:
    """Worker figures on PostgreSQL."""
    if pg_store_missing():
        return []
    return bench_db("postgres")


if __name__ == "__main__":
    for fig in bench_db(sys.argv[1] if len(sys.argv) > 1 else "sqlite"):
        print(fig)
