"""Child process for the child-run crash tests: start a batch of parent runs, each of which
starts one child run and waits for its result, and drive them to an end.

    python tests/crash/children_worker.py --db URL --tenant T --runs N [--until-waiting]

Parent ``i`` (flow ``order``) starts a ``charge`` child with ``ctx.start`` and waits for it
with ``ctx.wait_for``; the child sleeps on a durable timer, then completes with a result
that includes a journaled uuid (so a second child, or a result taken from the wrong child,
shows). Parents are started with idempotency keys, so a restarted process finds the runs of
its predecessor, each with a lineage with every field set (:func:`parent_lineage`).

The process exits when every parent is final, printing one JSON line with the fault points
it passed (``UNDERWAY_CRASH_AFTER`` arms them; see :mod:`underway.faults`). With
``--until-waiting`` it SIGKILLs itself instead as soon as a parent waits for its child and
no parent can move (every one waiting or final): a kill while parents wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

from pydantic import BaseModel
from worker import statuses_of, until_next_wake

from underway import Engine, Flow, RunContext, Runner, connect, faults
from underway.lineage import Lineage

CHILD_SLEEP_S = 1.0
"""The child's durable sleep: long enough that parents wait for it, short for a test."""


def parent_key(tenant: str, i: int) -> str:
    """The idempotency key that starts parent ``i`` of ``tenant``'s batch."""
    return f"{tenant}-order-{i}"


def parent_lineage(tenant: str, i: int) -> Lineage:
    """What parent ``i`` of ``tenant``'s batch starts with, every field set: its child
    must inherit all of it, however the worker was killed."""
    return Lineage(
        origin="webhook:orders", taint=("intake", f"mail-{i}"), shadow=True,
        subject=f"{tenant}-customer-{i}", purpose="billing", consent=f"consent-{i}",
        trace_context={"traceparent": f"00-{i + 1:032x}-{i + 1:016x}-01"},
        labels={"batch": tenant},
    )


class Order(BaseModel):
    """Input of a parent run."""

    n: int


class Progress(BaseModel):
    """State of either run."""

    receipt: str = ""


def build() -> list[Flow[Any, Any]]:
    """The parent and child flows."""
    order: Flow[Progress, Order] = Flow("order", state=Progress, input=Order)
    charge: Flow[Progress, Order] = Flow("charge", state=Progress, input=Order)

    @order.step(start=True)
    async def place(ctx: RunContext[Progress, Order]) -> Any:
        child = await ctx.start(charge, {"n": ctx.input.n})
        outcome = await ctx.wait_for(child)
        return ctx.done({"child": child, "status": outcome.status, "charged": outcome.result})

    @charge.step(start=True)
    async def begin(ctx: RunContext[Progress, Order]) -> Any:
        ctx.state.receipt = ctx.uuid()
        return ctx.sleep(CHILD_SLEEP_S, then=settle)

    @charge.step
    async def settle(ctx: RunContext[Progress, Order]) -> Any:
        return ctx.done({"n": ctx.input.n, "cents": 100 * ctx.input.n,
                         "receipt": ctx.state.receipt})

    return [order, charge]


async def drive(engine: Engine, tenant: str, runs: int, until_waiting: bool) -> dict[str, str]:
    """Start the batch (idempotently) and advance it until every parent is final."""
    ids = [engine.start("order", {"n": i}, tenant_id=tenant,
                        idempotency_key=parent_key(tenant, i),
                        lineage=parent_lineage(tenant, i))[0] for i in range(runs)]
    # Parents and children advance together: their commits, and the children's ends
    # signalled to their parents, share group commits.
    runner = Runner(engine, poll=0.05, concurrency=2 * runs)
    while True:
        await runner.run_until_idle()
        statuses = statuses_of(engine, tenant, ids)
        if all(s in ("completed", "failed", "cancelled") for s in statuses.values()):
            return statuses
        if until_waiting and "waiting" in statuses.values() and all(
            s in ("waiting", "completed", "failed", "cancelled") for s in statuses.values()
        ):
            os.kill(os.getpid(), signal.SIGKILL)
        await until_next_wake(engine, runner)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--until-waiting", action="store_true")
    p.add_argument("--lease-ttl", type=float, default=2.0)
    a = p.parse_args(argv)
    store = connect(a.db)
    engine = Engine(store, flows=build(), lease_ttl=a.lease_ttl, checkpoint_every=5)
    statuses = asyncio.run(drive(engine, a.tenant, a.runs, a.until_waiting))
    store.close()
    print(json.dumps({"hits": faults.hits(), "statuses": statuses}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
