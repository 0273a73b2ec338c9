"""Child process for the large-value crash test: drive one run whose step calls a tool
that returns a string of many chunks and keeps it in the state, until the run is final.

    python tests/crash/big_value_worker.py --db URL --size CHARS --chunk BYTES

The run is started with an idempotency key, so a second process finds the first one's
run. ``UNDERWAY_CRASH_AFTER`` with ``UNDERWAY_CRASH_POINTS=blob.after_chunk`` kills the
process after that many chunks are written, before the event that refers to them.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from pydantic import BaseModel

import underway as uw


class Doc(BaseModel):
    text: str = ""


def value(size: int) -> str:
    """The tool's result: the same on every attempt."""
    unit = 'chunk "é" \\ '
    return (unit * (size // len(unit) + 1))[:size]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--chunk", type=int, required=True)
    a = p.parse_args()

    @uw.tool(mutating=False)
    def fetch(args: dict[str, Any]) -> Any:
        return value(a.size)

    flow = uw.Flow("big", state=Doc)

    @flow.step(start=True)
    async def go(ctx: uw.RunContext[Doc, Any]) -> Any:
        ctx.state.text = await ctx.call(fetch, {})
        return ctx.done(len(ctx.state.text))

    store = uw.connect(a.db)
    store.codec.chunk_bytes = a.chunk
    engine = uw.Engine(store, flows=[flow], lease_ttl=1.0)
    run_id, _ = uw.Client(store).start("big", {}, idempotency_key="big-value")
    asyncio.run(uw.Runner(engine, poll=0.05).run_until_complete(run_id))
    store.close()


if __name__ == "__main__":
    main()
