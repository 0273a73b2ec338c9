"""A flow that pays once per run, and a worker process that advances its runs: what the
budget tests attack with many runs, one worker at concurrency 10, and two processes.

Run as ``python budget_app.py URL LOG [crash]``: it advances every run of the database
until none is left, appending one line to LOG per payment that reached the tool. With
``crash``, the first payment ends the process before it returns (after its intent
committed): its outcome is unknown.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.guard.budgets import Budget
from underway.runner import Runner

LIMIT_INR = 1000
"""The tenant's daily money budget."""

PRICE_INR = 700
"""What each run pays: one run fits the budget, two do not."""

BUDGETS = {
    "money": Budget(money={"INR": LIMIT_INR}, on_exceed="fail"),
    "three_payments": Budget(money={"INR": 3 * PRICE_INR}, on_exceed="fail"),
    "three_calls": Budget(tool_calls=3, on_exceed="fail"),
}
"""The tenant budgets a worker process may be told to apply (``BUDGET_APP_BUDGET``)."""

LOG = os.environ.get("BUDGET_APP_LOG", "")
CRASH = os.environ.get("BUDGET_APP_CRASH", "")
BUDGET = os.environ.get("BUDGET_APP_BUDGET", "money")


class Pay(BaseModel):
    amount: float
    currency: str = "INR"


class Paid(BaseModel):
    outcome: str = ""


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def pay(args: Pay) -> dict[str, Any]:
    """Pay ``amount``: a line in the log per payment made."""
    if CRASH and not Path(CRASH).exists():
        Path(CRASH).write_text("crashed")
        os._exit(3)
    # Let the other activations of this worker reach the guard while this one is paying.
    await asyncio.sleep(0)
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(f"{args.amount}\n")
    return {"paid": args.amount}


payments = uw.Flow("budget_payments", state=Paid, input=Pay, tools=(pay,))


@payments.step
async def go(ctx: uw.RunContext[Paid, Pay]) -> Any:
    """Pay once; a refusal is the run's outcome."""
    await ctx.call("pay", ctx.input.model_dump())
    return ctx.done("paid")


def engine(store: uw.Store, budget: str = "money") -> uw.Engine:
    """An engine whose tenants have budget ``budget`` of :data:`BUDGETS` (by default at
    most :data:`LIMIT_INR` a day); a run over it fails."""
    eng = uw.Engine(store, flows=[payments])
    eng.guard.tenant_budget = BUDGETS[budget]
    eng.guard.tenant_usage_ttl = 0.0
    return eng


def main(url: str) -> None:
    """Advance every run of ``url`` at concurrency 10 until none is left."""
    store = uw.connect(url)
    try:
        asyncio.run(Runner(engine(store, BUDGET), concurrency=10).run_until_idle())
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1])
