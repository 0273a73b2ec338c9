"""Big values: what one large tool result costs a worker, in memory and in the other runs'
step latency.

A worker process (a child of this one) runs two flows at once on one engine. ``big``: one
step calls a read-only tool that returns a string of V bytes and keeps it in the run's
state. ``small``: a loop of steps that each call a read-only no-op tool, until ``big`` has
committed its value. Before each big value, a small run makes 100 steps alone; three
rounds (``UNDERWAY_BENCH_BIG_ROUNDS``) interleave the two samples.

Figures, per database:

* ``peak_rss_write``: the worker's peak RSS (``VmHWM``, reset just before each big run)
  above its RSS then, divided by V (the highest round). Target at most 2.
* ``peak_rss_load``: a fresh process loads the run's state (which holds the value):
  the same ratio. Target at most 2.
* ``small_step_p50`` and ``small_step_p99``: the small run's time per step from the moment
  the tool returned the big value until the big run's next step begins (the value checked,
  hashed, its chunks written, the event committed), against its time per step alone;
  each pooled over the rounds.

V is ``UNDERWAY_BENCH_BIG_MB`` megabytes (default 200).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from typing import Any

from common import Figure, pg_reachable, pg_schema, pg_store_missing, sqlite_dir

SIZE_MB = int(os.environ.get("UNDERWAY_BENCH_BIG_MB", "200") or 200)
SMALL_STEPS = 100
"""Steps of the small run alone (the baseline) before each big value."""
ROUNDS = int(os.environ.get("UNDERWAY_BENCH_BIG_ROUNDS", "3") or 3)
"""Rounds of (the small run alone, then the big run beside another small run): the two
samples interleave, so a change of the machine's load touches both alike."""
TARGET = 2.0


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> int:
    """Reset the process's peak RSS to its RSS now (Linux), and return that."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def child_write(url: str, size: int) -> dict[str, Any]:
    """In the worker process: the small run alone, then the big run beside another."""
    from pydantic import BaseModel

    import underway as uw

    class Doc(BaseModel):
        text: str = ""

    class Loop(BaseModel):
        n: int = 0

    class Steps(BaseModel):
        alone: int = 0

    marks: dict[str, float] = {}
    ticks: list[float] = []

    @uw.tool(mutating=False, timeout=600)
    def fetch(args: dict[str, Any]) -> Any:
        # The window starts once the tool has made its value: what follows is underway's.
        # A character of its own each round: a value stored before would not be written.
        value = chr(ord("a") + len(seconds)) * size
        marks["start"] = time.perf_counter()
        return value

    @uw.tool(mutating=False)
    def noop(args: dict[str, Any]) -> Any:
        return 1

    big = uw.Flow("big", state=Doc)

    @big.step(start=True)
    async def go(ctx: uw.RunContext[Doc, Any]) -> Any:
        ctx.state.text = await ctx.call(fetch, {})
        return ctx.goto("end")

    @big.step()
    async def end(ctx: uw.RunContext[Doc, Any]) -> Any:
        marks.setdefault("end", time.perf_counter())
        return ctx.done(len(ctx.state.text))

    small = uw.Flow("small", state=Loop, input=Steps)

    @small.step(start=True)
    async def tick(ctx: uw.RunContext[Loop, Steps]) -> Any:
        ticks.append(time.perf_counter())
        await ctx.call(noop, {})
        ctx.state.n += 1
        alone = ctx.input.alone
        if (alone and ctx.state.n >= alone) or (not alone and "end" in marks):
            return ctx.done(ctx.state.n)
        return ctx.goto("tick")

    store = uw.connect(url)
    engine = uw.Engine(store, flows=[big, small])
    client = uw.Client(store)
    alone: list[float] = []
    during: list[float] = []
    peak = 0
    seconds: list[float] = []
    for _ in range(ROUNDS):
        ticks.clear()
        client.start("small", {"alone": SMALL_STEPS})
        asyncio.run(uw.Runner(engine, concurrency=4).run_until_idle())
        alone += [b - a for a, b in itertools.pairwise(ticks)]
        ticks.clear()
        marks.clear()
        big_id, _ = client.start("big", {})
        client.start("small", {})
        base = _reset_peak()
        asyncio.run(uw.Runner(engine, concurrency=4).run_until_idle())
        peak = max(peak, _status("VmHWM") - base)
        during += [b - a for a, b in itertools.pairwise(ticks)
                   if b >= marks["start"] and a <= marks["end"]]
        seconds.append(marks["end"] - marks["start"])
    return {"run": big_id, "peak": peak, "alone": alone, "during": during,
            "seconds": sorted(seconds)[len(seconds) // 2]}


def child_load(url: str, run_id: str) -> dict[str, Any]:
    """In a fresh process: load the big run's state."""
    import underway as uw
    from underway.journal import Journal

    store = uw.connect(url, migrate=False)
    journal = Journal(store)
    store.get_run("default", run_id)
    base = _reset_peak()
    state = journal.load("default", run_id)
    peak = _status("VmHWM")
    assert isinstance(state.state, dict) and len(state.state["text"]) > 0
    store.close()
    return {"base": base, "peak": peak}


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the worker process failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _figures(db: str, url: str) -> list[Figure]:
    size = SIZE_MB * 1_000_000
    w = _child("--write", url, str(size))
    r = _child("--load", url, w["run"])
    write = w["peak"] / size
    load = (r["peak"] - r["base"]) / size
    note = (f"V = {SIZE_MB} MB; value made and written in {w['seconds']:.1f} s "
            f"(median of {ROUNDS})")
    figs = [
        Figure(f"{db}.big_values.peak_rss_write", round(write, 3), "x value",
               target=f"<= {TARGET}", ok=write <= TARGET, note=note),
        Figure(f"{db}.big_values.peak_rss_load", round(load, 3), "x value",
               target=f"<= {TARGET}", ok=load <= TARGET, note=note),
    ]
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        alone, during = _pct(w["alone"], q), _pct(w["during"], q)
        figs.append(Figure(
            f"{db}.big_values.small_step_{name}", round(during * 1000, 3), "ms",
            baseline=round(alone * 1000, 3), ratio=round(during / alone, 2),
            note=f"{len(w['during'])} steps during {ROUNDS} big writes, "
                 f"{len(w['alone'])} alone, interleaved"))
    return figs


def bench_sqlite() -> list[Figure]:
    """The figures on SQLite."""
    with sqlite_dir() as d:
        return _figures("sqlite", f"sqlite:///{d}/big.db")


def bench_postgres() -> list[Figure]:
    """The figures on PostgreSQL."""
    why = pg_reachable() or pg_store_missing()
    if why:
        print(f"  skipped: {why}")
        return []
    with pg_schema() as (_, url):
        return _figures("postgres", url)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", nargs=2, metavar=("URL", "BYTES"))
    p.add_argument("--load", nargs=2, metavar=("URL", "RUN"))
    a = p.parse_args()
    if a.write:
        print(json.dumps(child_write(a.write[0], int(a.write[1]))))
    elif a.load:
        print(json.dumps(child_load(*a.load)))
    else:
        for fig in bench_sqlite() + bench_postgres():
            print(fig)


if __name__ == "__main__":
    main()
