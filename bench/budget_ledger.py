"""What a tenant budget costs on the hot path: one guarded tool call per run, with a tenant
budget (a reservation in the budget ledger before the intent, settled after the outcome)
against the same call with no budget, measured in one run on the same database.

``RUNS`` runs each make one mutating tool call that moves money and sends a message,
then finish, driven by one worker at concurrency 10. The baseline is the same
workload on an engine without a tenant budget. The figure is the time per run with the
budget, as a ratio of the baseline. The budget is large enough that no call is refused,
and the ledger must end with exactly what the runs spent.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway.guard.budgets import Budget, tenant_usage
from underway.runner import Runner

RUNS = 200
REPS = 3


class Pay(BaseModel):
    amount: Decimal
    currency: str = "INR"


class Empty(BaseModel):
    """No state."""


@uw.tool(mutating=True, message=True, idempotent=True, amount="amount",
         currency="arg:currency", money_direction="out")
async def pay(args: Pay) -> dict[str, Any]:
    """Pay and tell the customer."""
    return {"paid": str(args.amount)}


flow: uw.Flow[Empty, Any] = uw.Flow("budget_bench", state=Empty, tools=[pay])


@flow.step
async def once(ctx: uw.RunContext[Empty, Any]) -> Any:
    await ctx.call(pay, {"amount": "7"})
    return ctx.done()


BUDGET = Budget(money={"INR": Decimal(10) ** 9}, messages=10**9, tool_calls=10**9,
                on_exceed="fail")


def _per_run_ms(url: str, budgeted: bool, rep: int) -> float:
    store = uw.connect(url)
    try:
        engine = uw.Engine(store, flows=[flow], tenant_budget=BUDGET if budgeted else None)
        tenant = f"t-{int(budgeted)}-{rep}"
        for i in range(RUNS):
            engine.start(flow, None, tenant_id=tenant, run_id=f"{tenant}-{i}")
        began = time.perf_counter()
        asyncio.run(Runner(engine, concurrency=10).run_until_idle())
        elapsed = time.perf_counter() - began
        spent = tenant_usage(store, tenant, since=0)
        if spent.tool_calls != RUNS or spent.money.get("INR") != 7 * RUNS:
            raise RuntimeError(f"the runs spent {spent}, not {RUNS} calls of 7 INR")
        if budgeted:
            day = float(int(time.time()) // 86400 * 86400)
            used = store.budget_used(tenant, day) or {}
            if used.get("money.INR") != 7.0 * RUNS:
                raise RuntimeError(f"the ledger holds {used}, not {7 * RUNS} INR")
    finally:
        store.close()
    return elapsed / RUNS * 1000


def _bench(url_of: Any, db: str) -> list[Figure]:
    plain, held = [], []
    for rep in range(REPS):
        with url_of() as url:
            plain.append(_per_run_ms(url, False, rep))
            held.append(_per_run_ms(url, True, rep))
    base, value = median(plain), median(held)
    return [Figure(f"tenant_budget_call_{db}", value, "ms/run", base, value / base,
                   target="ratio < 1.5", ok=value / base < 1.5,
                   note=f"{RUNS} runs of one guarded call moving money, concurrency 10; "
                        "baseline: no tenant budget")]


def bench_sqlite() -> list[Figure]:
    """The budget's cost on SQLite."""

    @contextmanager
    def url() -> Any:
        with sqlite_dir() as d:
            yield f"sqlite:///{d}/budget.db"

    return _bench(url, "sqlite")


def bench_postgres() -> list[Figure]:
    """The budget's cost on PostgreSQL."""

    @contextmanager
    def url() -> Any:
        with pg_schema() as (_, u):
            yield u

    return _bench(url, "postgres")
