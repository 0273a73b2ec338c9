"""Child process for the eager-start crash test: a worker that starts its own runs.

    python tests/crash/eager_worker.py --db URL --owner NAME --runs N [--lease-ttl S]

A :class:`~underway.Worker` serves the engine while the process starts ``N`` runs of a
three-step flow through ``engine.start`` with idempotency keys (``eager-{i}``): each is
leased to the worker in its start's own transaction while a slot is free. With
``UNDERWAY_CRASH_AFTER`` and ``UNDERWAY_CRASH_POINTS=start.eager_after_commit`` the
process SIGKILLs itself right after an eager start commits. Otherwise it exits once every
run completed, printing one JSON line: the fault points it passed, how many runs it took
eagerly and which starts created their run.

``--owner`` names the worker's leases in a form no process of this host has, so a run it
leaves is taken over only when its lease runs out, never freed early as a dead local
process's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from typing import Any

from pydantic import BaseModel

from underway import Engine, Flow, RunContext, Worker, connect, faults, tool

STEPS = 3


class Count(BaseModel):
    """How many steps ran."""

    i: int = 0


class Steps(BaseModel):
    """How many steps to run."""

    n: int = STEPS


@tool(mutating=False)
async def nothing(args: Any) -> Any:
    """A step's read-only call."""
    return {"step": args["i"]}


counting: Flow[Count, Steps] = Flow("counting", state=Count, input=Steps)


@counting.step
async def tick(ctx: RunContext[Count, Steps]) -> Any:
    await ctx.call(nothing, {"i": ctx.state.i})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)


def run_key(i: int) -> str:
    """The idempotency key that starts run ``i``."""
    return f"eager-{i}"


async def serve(engine: Engine, runs: int) -> dict[str, Any]:
    """Start the runs under a serving worker; return once all of them completed."""
    worker = Worker(engine, concurrency=runs + 1, poll=0.05, min_poll=0.02)
    serving = asyncio.create_task(worker.run())
    await worker.ready.wait()
    created = {}
    for i in range(runs):
        run_id, made = await engine.io(functools.partial(
            engine.start, counting, {"n": STEPS}, idempotency_key=run_key(i)))
        created[run_id] = made
    while not all(status(engine, r) == "completed" for r in created):
        await asyncio.sleep(0.02)
    worker.stop()
    await serving
    return {"hits": faults.hits(), "eager_starts": worker.eager_starts, "created": created}


def status(engine: Engine, run_id: str) -> str | None:
    """The run's status as its row says now."""
    row = engine.store.get_run("default", run_id)
    return None if row is None else row.status


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--lease-ttl", type=float, default=2.0)
    a = p.parse_args(argv)
    store = connect(a.db)
    engine = Engine(store, flows=[counting], tools=[nothing], owner=a.owner,
                    lease_ttl=a.lease_ttl)
    report = asyncio.run(serve(engine, a.runs))
    store.close()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
