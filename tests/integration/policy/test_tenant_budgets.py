"""Per-tenant budgets (``TenantBudgets``): each tenant's runs are held to its own budget,
or the default, on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.errors import ConfigurationError
from underway.guard.budgets import Budget, TenantBudgets
from underway.store.base import Store


class Sent(BaseModel):
    sent: int = 0


@uw.tool(idempotent=True, message=True)
async def send(args: Any) -> Any:
    return {"sent": args["n"]}


flow: uw.Flow[Sent, Any] = uw.Flow("mailer", state=Sent, tools=[send])


@flow.step
async def go(ctx: uw.RunContext[Sent, Any]) -> uw.flow.Next:
    for n in range(2):
        await ctx.call(send, {"n": n})
        ctx.state.sent += 1
    return ctx.done(ctx.state.sent)


@pytest.fixture(params=["memory", "sqlite_url", pytest.param("pg_url", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    url = "memory://" if request.param == "memory" else request.getfixturevalue(request.param)
    s = uw.connect(url)
    yield s
    s.close()


def finish(engine: uw.Engine, tenant: str, runs: int) -> list[uw.RunState]:
    """Start ``runs`` runs of ``tenant`` one after the other; their final states."""
    done = []
    for _ in range(runs):
        run_id, _ = engine.start(flow, tenant_id=tenant)
        asyncio.run(uw.Runner(engine).run_until_idle())
        done.append(engine.state(run_id, tenant_id=tenant))
    return done


def test_each_tenant_spends_against_its_own_budget_or_the_default(store: Store) -> None:
    budgets = TenantBudgets(
        default=Budget(messages=3, on_exceed="fail"),
        tenants={"vip": Budget(messages=6, on_exceed="fail"), "internal": Budget()},
    )
    engine = uw.Engine(store, flows=[flow], tenant_budget=budgets)
    engine.guard.tenant_usage_ttl = 0.0

    acme = finish(engine, "acme", 2)
    assert [s.status for s in acme] == ["completed", "failed"]
    assert acme[1].messages == 1, "the fourth message of acme's day was stopped"
    [over] = [r.event for r in engine.journal.history("acme", acme[1].run_id)
              if isinstance(r.event, ev.BudgetExceeded)]
    assert (over.scope, over.metric, over.limit) == ("tenant", "messages", 3.0)

    vip = finish(engine, "vip", 4)
    assert [s.status for s in vip] == ["completed", "completed", "completed", "failed"]
    assert [s.status for s in finish(engine, "internal", 3)] == ["completed"] * 3
    assert [s.status for s in finish(engine, "globex", 2)] == ["completed", "failed"]


def test_without_a_default_only_the_named_tenants_are_limited(store: Store) -> None:
    engine = uw.Engine(store, flows=[flow], tenant_budget=TenantBudgets(
        tenants={"trial": Budget(messages=1, on_exceed="fail")}))
    engine.guard.tenant_usage_ttl = 0.0
    assert [s.status for s in finish(engine, "trial", 1)] == ["failed"]
    assert [s.status for s in finish(engine, "acme", 3)] == ["completed"] * 3


def test_tenant_budgets_are_checked_when_made() -> None:
    with pytest.raises(ConfigurationError, match="tenant 'acme'"):
        TenantBudgets(tenants={"acme": {"messages": 3}})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="not a tenant id"):
        TenantBudgets(tenants={"": Budget()})
    with pytest.raises(ConfigurationError, match="default tenant budget"):
        TenantBudgets(default=3)  # type: ignore[arg-type]
    assert TenantBudgets(default=Budget(messages=1)).for_tenant("x") == Budget(messages=1)
