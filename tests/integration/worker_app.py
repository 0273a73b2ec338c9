"""What the worker tests run: ``underway worker --app worker_app:app`` (from this folder).

A job computes (a read-only tool that waits ``delay`` seconds and reports the pid of the
worker process that ran it), optionally naps on a durable timer, waits for a signal or
passes a gate, computes again and finishes with the pids of the processes that ran each
step. The gate lets a test hold a step in flight: the gated tool appends its pid to
``<gate>/started`` and waits until the file ``<gate>/open`` exists.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from underway import Flow, RunContext, tool
from underway.flow import Next


class Job(BaseModel):
    """What a job does."""

    n: int = 0
    delay: float = 0.0
    nap: float = 0.0
    gate: str = ""
    wait_signal: bool = False


class Tally(BaseModel):
    """Which processes ran the job's steps, and what it computed."""

    pids: list[int] = []
    total: int = 0


@tool(mutating=False)
async def compute(args: Any) -> Any:
    await asyncio.sleep(args["delay"])
    return {"pid": os.getpid(), "double": 2 * args["n"]}


@tool(mutating=False, timeout=600)
async def gate(args: Any) -> Any:
    folder = Path(args["gate"])
    with (folder / "started").open("a") as f:
        f.write(f"{os.getpid()}\n")
    while not (folder / "open").exists():
        await asyncio.sleep(0.01)
    return {"pid": os.getpid(), "double": 0}


jobs: Flow[Tally, Job] = Flow("job", state=Tally, input=Job)

Ctx = RunContext[Tally, Job]


def _count(ctx: Ctx, result: Any) -> None:
    ctx.state.pids.append(result["pid"])
    ctx.state.total += result["double"]


@jobs.step
async def begin(ctx: Ctx) -> Next:
    _count(ctx, await ctx.call(compute, {"n": ctx.input.n, "delay": ctx.input.delay}))
    if ctx.input.gate:
        return ctx.goto(gated)
    if ctx.input.wait_signal:
        return ctx.wait("go", then=middle)
    if ctx.input.nap:
        return ctx.sleep(ctx.input.nap, then=middle)
    return ctx.goto(middle)


@jobs.step
async def gated(ctx: Ctx) -> Next:
    _count(ctx, await ctx.call(gate, {"gate": ctx.input.gate}))
    return ctx.goto(middle)


@jobs.step
async def middle(ctx: Ctx) -> Next:
    _count(ctx, await ctx.call(compute, {"n": ctx.input.n, "delay": ctx.input.delay}))
    return ctx.goto(end)


@jobs.step
async def end(ctx: Ctx) -> Next:
    return ctx.done({"total": ctx.state.total, "pids": ctx.state.pids})


app = [jobs, compute, gate]
"""The ``--app`` target: the flow and its tools."""


def make_app() -> list[Any]:
    """The same, from a function (``--app worker_app:make_app``)."""
    return list(app)
