"""Child process for the MCP crash test: start (once, by key) a run that calls tools of the
test MCP server (tests/integration/mcp/server.py), and drive it until it settles.

    python tests/crash/mcp_worker.py --db URL --ledger DIR --http URL

The run's one step looks a price up (read-only, over HTTP), stores it with ``hold_put``
(idempotent, over HTTP), looks again with ``peek`` (read-only, over HTTP), then posts it
with ``hold`` (mutating, not idempotent, no reconcile hook; over stdio, inside the
sandbox). The held calls wait for the test to release them, so the test can SIGKILL this
process while any of them is in flight. The child
prints one JSON line with the run's status when the run completes or escalates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "mcp"))

import mcp_ledger

import underway as uw
import underway.mcp as uw_mcp


class Order(BaseModel):
    """What the run keeps."""

    price: Any = None
    stored: Any = None
    seen: Any = None
    posted: Any = None


async def main(db: str, ledger: Path, http_url: str) -> dict[str, Any]:
    web = await uw_mcp.Toolset(mcp_ledger.http(http_url), prefix="web_").load()
    box = await uw_mcp.Toolset(mcp_ledger.stdio(ledger), prefix="box_",
                               include=["hold"]).load()
    lookup, hold_put, peek = web.tool("lookup"), web.tool("hold_put"), web.tool("peek")
    hold = box.tool("hold")
    flow = uw.Flow("mcp_order", state=Order, tools=[lookup, hold_put, peek, hold])

    @flow.step(start=True)
    async def order(ctx: uw.RunContext[Order, Any]) -> Any:
        ctx.state.price = await ctx.call(lookup, {"item": "tea"})
        ctx.state.stored = await ctx.call(hold_put, {"label": "put"})
        ctx.state.seen = await ctx.call(peek, {"label": "peek"})
        ctx.state.posted = await ctx.call(hold, {"label": "post"})
        return ctx.done(ctx.state.model_dump(mode="json"))

    engine = uw.Engine(uw.connect(db), flows=[flow], lease_ttl=1.0)
    try:
        run_id, _ = engine.start(flow, {}, idempotency_key="order-1")
        state = await uw.Runner(engine, poll=0.05).run_until_complete(run_id)
        return {"run_id": run_id, "status": state.status, "result": state.result}
    finally:
        await web.aclose()
        await box.aclose()
        engine.store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--http", required=True)
    a = p.parse_args()
    print(json.dumps(asyncio.run(main(a.db, Path(a.ledger), a.http))))
