"""What a tenant budget check costs as the tenant's runs pile up: the tenant's usage today
counted from scratch against a kept :class:`underway.guard.budgets.TenantUsage` refreshed.

``RUNS`` runs of one tenant on SQLite each call a model twice and a tool twice and
finish (about 12 events each). The baseline is :func:`underway.guard.budgets.tenant_usage`, a
count from every journal (what each check cost before usage was kept); the figure is a
refresh of a kept usage after ``MOVED`` of the runs took one more step — the steady state
of a worker checking a tenant budget every few seconds. Both counts must agree.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median
from underway.guard.budgets import TenantUsage, tenant_usage
from underway.testing import ScriptedModel

RUNS = 1_000
MOVED = 10
T0 = 1_717_200_000.0


class Empty(BaseModel):
    """No state."""


def _world(path: Path) -> tuple[uw.Engine, uw.Flow[Empty, Any], uw.ManualClock]:
    clock = uw.ManualClock(T0)
    model = ScriptedModel(["ok"] * (4 * RUNS + 4 * MOVED), cost_per_token=0.001)

    @uw.tool(idempotent=True, message=True)
    def send(args: Any) -> Any:
        return {"sent": True}

    flow: uw.Flow[Empty, Any] = uw.Flow("usage", state=Empty)

    @flow.step(start=True)
    async def work(ctx: uw.RunContext[Empty, Any]) -> Any:
        await ctx.model(model, {"prompt": "draft"})
        await ctx.call(send, {"n": 1})
        return ctx.sleep(60, then=more)

    @flow.step
    async def more(ctx: uw.RunContext[Empty, Any]) -> Any:
        await ctx.model(model, {"prompt": "again"})
        await ctx.call(send, {"n": 2})
        return ctx.done()

    engine = uw.Engine(uw.connect(f"sqlite:///{path}"), flows=[flow], tools=[send],
                       clock=clock)
    return engine, flow, clock


def bench(*, reps: int = 5) -> list[Figure]:
    """A from-scratch count against a kept, refreshed one, for a tenant of ``RUNS`` runs."""
    with tempfile.TemporaryDirectory() as d:
        engine, flow, clock = _world(Path(d) / "usage.db")
        store = engine.store
        for i in range(RUNS):
            engine.start(flow, None, tenant_id="acme", run_id=f"r{i}")
        asyncio.run(uw.Runner(engine).run_until_idle())
        clock.advance(61)
        asyncio.run(uw.Runner(engine).run_until_idle())  # every run completed
        kept = TenantUsage("acme", since=T0)
        kept.refresh(store)
        full_s, kept_s = [], []
        for rep in range(reps):
            for i in range(MOVED):
                engine.start(flow, None, tenant_id="acme", run_id=f"new-{rep}-{i}")
            asyncio.run(uw.Runner(engine).run_until_idle())
            began = time.perf_counter()
            fresh = tenant_usage(store, "acme", since=T0)
            full_s.append(time.perf_counter() - began)
            began = time.perf_counter()
            usage = kept.refresh(store)
            kept_s.append(time.perf_counter() - began)
            if usage != fresh:
                raise RuntimeError(f"kept usage {usage} differs from a fresh count {fresh}")
        store.close()
    full, refresh = median(full_s) * 1000, median(kept_s) * 1000
    return [
        Figure("tenant_usage_from_scratch", full, "ms",
               note=f"{RUNS:,}+ finished runs of one tenant today, every journal read"),
        Figure("tenant_usage_refresh", refresh, "ms", full, refresh / full,
               target="ratio < 0.2", ok=refresh / full < 0.2,
               note=f"a kept TenantUsage after {MOVED} runs moved; baseline: from scratch"),
    ]
