"""Child process for the signed-decision crash test: held refunds whose approvals wait in
their inboxes, one signed before JCS and one over JCS.

    python tests/crash/decisions_worker.py --db URL --effects FILE {start,work}

``start`` starts the two runs (idempotently) and drives them until they wait for their
approval. ``work`` drives them until both are final, printing one JSON line with the fault
points it passed (``UNDERWAY_CRASH_AFTER`` arms them; see :mod:`underway.faults`).

The refund appends its idempotency key to the effects file (the outside system) before it
returns. It is not idempotent; its reconcile hook reads that file, so a refund whose outcome
a kill hid is settled from the file and never repeated, and one that never happened runs
again, through the whole guard: the journaled decision is verified again first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from pydantic import BaseModel
from worker import until_next_wake

from underway import CallInfo, Engine, Flow, Reconciled, RunContext, Runner, connect, faults, tool
from underway.guard.policy import policy_from_dict

TENANT = "acme"
RUNS = ("refund-before-jcs", "refund-jcs")
FINAL = ("completed", "failed", "cancelled", "dead", "escalated")


class Refund(BaseModel):
    """The refund a run makes."""

    invoice: str
    cents: int


class Notes(BaseModel):
    """The runs keep nothing of their own."""


def applied(effects: str) -> set[str]:
    """The idempotency keys of the refunds the outside system made."""
    try:
        with open(effects, encoding="utf-8") as f:
            return set(f.read().split())
    except FileNotFoundError:
        return set()


def build(effects: str) -> Flow[Notes, Refund]:
    """The refunds flow: one irreversible refund, held for a signed approval by finance."""

    async def settled(key: str) -> Reconciled:
        return (Reconciled.happened({"refunded": key}) if key in applied(effects)
                else Reconciled.not_happened())

    @tool(mutating=True, idempotent=False, reconcile=settled)
    def refund(args: Refund, info: CallInfo) -> Any:
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{info.key}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"refunded": info.key}

    policy = policy_from_dict({"version": "v1", "rules": [
        {"id": "refunds", "tools": ["refund"], "outcome": "require_approval",
         "approver_role": "finance", "expires_in": 86400}]})
    flow: Flow[Notes, Refund] = Flow("refunds", state=Notes, input=Refund, tools=[refund],
                                     policy=policy)

    @flow.step
    async def pay(ctx: RunContext[Notes, Refund]) -> Any:
        return ctx.done(await ctx.call(refund, ctx.input.model_dump()))

    return flow


async def drive(engine: Engine, until: tuple[str, ...]) -> dict[str, str]:
    """Advance both runs until each one's status is in ``until``."""
    runner = Runner(engine, poll=0.05)
    while True:
        await runner.run_until_idle()
        statuses = {r: engine.client.get_run(r, tenant_id=TENANT).status for r in RUNS}
        if all(s in until for s in statuses.values()):
            return statuses
        # A killed predecessor's lease keeps a run until it lapses: wait for the next due
        # run, one poll at most.
        await until_next_wake(engine, runner)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("mode", choices=["start", "work"])
    a = p.parse_args(argv)
    store = connect(a.db)
    engine = Engine(store, flows=[build(a.effects)], lease_ttl=1.0)
    if a.mode == "start":
        for i, run_id in enumerate(RUNS):
            engine.start("refunds", {"invoice": f"INV-{i}", "cents": 500 + i}, run_id=run_id,
                         tenant_id=TENANT)
        statuses = asyncio.run(drive(engine, ("waiting",)))
    else:
        statuses = asyncio.run(drive(engine, FINAL))
    store.close()
    print(json.dumps({"hits": faults.hits(), "statuses": statuses}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
