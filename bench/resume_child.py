"""A worker process for the crash-resume benchmark.

``resume_child.py crash URL RUN_ID`` starts the run and drives it; the parent arms
``UNDERWAY_CRASH_AFTER`` so this process SIGKILLs itself mid-run.

``resume_child.py resume URL RUN_ID`` is the fresh process that takes over: it notes the
monotonic time once its imports are done and its store is open ("ready"), then runs its
runner, which frees the dead process's lease and resumes the run. It prints one JSON line
with both times and the run whose step started first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.store import connect


class State(BaseModel):
    """How many steps have run."""

    i: int = 0


class _Started(BaseException):
    """Ends the resuming process as soon as its first step has started."""


async def nothing(args: Any) -> None:
    """Does nothing; a step's one effect."""
    return None


noop: uw.Tool = uw.tool(nothing, name="noop", mutating=False)


flow: uw.Flow[State, Any] = uw.Flow("crashloop", state=State)
resuming = False
first_step: dict[str, Any] = {}


@flow.step
async def tick(ctx: uw.RunContext[State, Any]) -> Any:
    if resuming:
        first_step.update(at=time.monotonic(), run_id=ctx.run_id, attempt=ctx.attempt)
        raise _Started
    await ctx.call(noop, {})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < 1_000_000 else ctx.done()


def main() -> None:
    """Run as ``crash`` or ``resume`` (see the module docstring)."""
    global resuming
    mode, url, run_id = sys.argv[1:4]
    store = connect(url)
    engine_type, runner_type = uw.Engine, uw.Runner  # the package root loads them on first use
    ready = time.monotonic()
    engine = engine_type(store, flows=[flow], tools=[noop])
    runner = runner_type(engine)
    if mode == "crash":
        engine.start(flow, run_id=run_id)
        asyncio.run(runner.run_until_complete(run_id))
        raise SystemExit("the run finished before the crash point")
    resuming = True
    with contextlib.suppress(_Started):
        asyncio.run(runner.run_until_idle())
    if not first_step:
        raise SystemExit("no step started in the resuming process")
    print(json.dumps({"ready": ready, "first_step": first_step["at"],
                      "run_id": first_step["run_id"], "attempt": first_step["attempt"]}))


if __name__ == "__main__":
    main()
