"""underway, driven as production drives it: a flow whose step calls a read-only tool
(the step's ~200-byte result) and goes to itself, started and leased in one commit
(``Engine.start_leased``, an eager start, as a worker takes the runs it starts) and run by
``Engine.activate`` on the SQLite or PostgreSQL store (one commit per step). Runs in flight
are activated together on one event loop, as a worker drives the runs it has leased. A
killed run is resumed by a fresh process's :class:`underway.Runner`, which frees the dead
process's lease and continues from the journal.

Runs in the project's virtual environment; see ``protocol.py`` for the modes.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid
from importlib.metadata import version
from typing import Any

import protocol
from protocol import CLOCK, step_result
from pydantic import BaseModel

import underway as uw
from underway.engine import EagerStart
from underway.store import connect

TENANT = "default"
Engine, Runner = uw.Engine, uw.Runner
"""Read here, not on first use, so the package root has loaded them before the resuming
process notes that its imports are done."""
STORE_MODULE = importlib.import_module(
    "underway.store.postgres" if sys.argv[1:2] == ["postgres"] else "underway.store.sqlite")
"""The store of the worker's database, imported before the process notes it is ready, as
LangGraph's worker imports its checkpointers and psycopg (``connect`` would load it on
first use). Only the one needed: the other would add to the time from kill to first step."""


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
    CLOCK.enter(args.i)
    return step_result(args.run, args.i)


step_tool: uw.Tool = uw.tool(produce, name="produce", read_only=True)
flow: uw.Flow[LoopState, LoopInput] = uw.Flow("peers_loop", state=LoopState, input=LoopInput)


@flow.step
async def tick(ctx: uw.RunContext[LoopState, LoopInput]) -> Any:
    await ctx.call(step_tool, {"run": ctx.input.run, "i": ctx.state.i})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)


class UnderwayPeer:
    """underway's engine on one store."""

    def __init__(self, db: str, url: str) -> None:
        self.store = connect(f"sqlite:///{url}" if db == "sqlite" else url)
        self.engine = Engine(self.store, flows=[flow], tools=[step_tool])

    def _start(self, run_id: str, steps: int) -> EagerStart:
        start = self.engine.start_leased(self.engine.prepare_start(
            flow, {"run": run_id, "n": steps}, run_id=run_id, tenant_id=TENANT))
        if start.lease is None:
            raise RuntimeError(f"run {run_id} was not leased by its start")
        return start

    async def _activate(self, start: EagerStart) -> Any:
        assert start.lease is not None
        return await self.engine.activate(start.lease, start=start)

    def sequential(self, runs: int, steps: int) -> None:
        for _ in range(runs):
            start = self._start(f"seq-{uuid.uuid4().hex}", steps)
            state = asyncio.run(self._activate(start))
            if state.status != "completed" or state.steps_completed != steps:
                raise RuntimeError(f"run {start.run_id} ended {state.status} "
                                   f"after {state.steps_completed} steps")

    def in_flight(self, runs: int, steps: int) -> None:
        starts = [self._start(f"fly-{uuid.uuid4().hex}", steps) for _ in range(runs)]

        async def all_at_once() -> list[Any]:
            return await asyncio.gather(*(self._activate(s) for s in starts))

        if any(s.status != "completed" for s in asyncio.run(all_at_once())):
            raise RuntimeError("a run in flight did not complete")

    def crash(self, run_id: str, steps: int) -> None:
        asyncio.run(self._activate(self._start(run_id, steps)))

    def resume(self, run_id: str, steps: int) -> Any:
        state = asyncio.run(Runner(self.engine).run_until_complete(run_id, tenant_id=TENANT))
        if state.status != "completed":
            raise RuntimeError(f"resumed run {run_id} ended {state.status}")
        return state.steps_completed

    def close(self) -> None:
        self.store.close()


if __name__ == "__main__":
    protocol.main(UnderwayPeer, f"underway {version('underway')}")
