"""A worker process of the example: load both servers' tools, start the order's run (once,
by key), and drive it until it settles; print one JSON line.

    python examples/mcp_agent/worker.py --db URL --data DIR --shipping URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.mcp_agent import app

import underway as uw


async def main(db: str, data: Path, shipping_url: str) -> dict[str, Any]:
    store, ship = await app.toolsets(data, shipping_url)
    order_agent = app.agent(store, ship)
    engine = uw.Engine(uw.connect(db), flows=[order_agent.flow], lease_ttl=1.0)
    try:
        run_id, _ = engine.start(order_agent.flow, {"goal": "ship order ORD-7"},
                                 idempotency_key=app.ORDER["order"])
        state = await uw.Runner(engine, poll=0.05).run_until_complete(run_id)
        return {"run_id": run_id, "status": state.status, "result": state.result}
    finally:
        await store.aclose()
        await ship.aclose()
        engine.store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--shipping", required=True)
    a = p.parse_args()
    print(json.dumps(asyncio.run(main(a.db, a.data, a.shipping))))
