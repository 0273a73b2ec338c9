"""Child process for the label crash test: start (once, by key) a run whose step labels it,
then makes a mutating call, and drive it until it is final.

    python tests/crash/labels_worker.py --db URL

Armed with ``UNDERWAY_CRASH_POINTS=effect.before_run`` it is killed after the call's intent
(and the label journaled with it) committed, before the call ran. The next process takes
the run over once the lease expires and runs the step again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from pydantic import BaseModel

import underway as uw

CHARGES: list[str] = []


class S(BaseModel):
    pass


@uw.tool(idempotent=True)
async def charge(args: dict[str, Any]) -> dict[str, Any]:
    """Charge an order (idempotent: a run taken over calls it again)."""
    CHARGES.append(str(args["order"]))
    return {"ok": True}


orders: uw.Flow[S, Any] = uw.Flow("orders", state=S, tools=[charge])


@orders.step(start=True)
async def pay(ctx: uw.RunContext[S, Any]) -> Any:
    ctx.label(stage="charging", attempt_seen=True)
    await ctx.call(charge, {"order": "PO-7"})
    ctx.label(stage="charged")
    return ctx.done({})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    a = p.parse_args()
    engine = uw.Engine(uw.connect(a.db), flows=[orders], lease_ttl=1.0)
    run_id, _ = engine.start("orders", {}, idempotency_key="PO-7", labels={"po": "PO-7"})
    asyncio.run(uw.Runner(engine, poll=0.05).run_until_complete(run_id))
    print(json.dumps({"run_id": run_id, "charges": CHARGES}))


if __name__ == "__main__":
    main()
