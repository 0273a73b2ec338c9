"""A fresh runner taking over a run a dead process of this host leased: the dead lease ends
in the claim's own transaction (no commit of its own), and the claim and the run's load
make one trip to the store's thread before the first step."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.identity import worker_identity
from underway.store import Store, connect


class Count(BaseModel):
    """How many steps ran."""

    i: int = 0


flow: uw.Flow[Count, None] = uw.Flow("takeover_trips", state=Count)
entered: list[int] = []


@flow.step
async def tick(ctx: uw.RunContext[Count, None]) -> Any:
    entered.append(ctx.state.i)
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < 3 else ctx.done(ctx.state.i)


def dead_owner() -> str:
    """An owner id of this host whose process is gone (this pid, another start time)."""
    host, space, pid, start = worker_identity().split(":")
    return f"{host}:{space}:{pid}:{int(start) + 1}"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    opened = connect(url)
    yield opened
    opened.close()


def test_a_takeover_ends_the_dead_lease_in_its_claim_and_loads_in_the_same_trip(
    store: Store,
) -> None:
    engine = uw.Engine(store, flows=[flow])
    run_id, _ = engine.start(flow)
    [held] = store.claim(owner=dead_owner(), now=engine.clock.now(), ttl=600)
    assert held.run_id == run_id

    fresh = uw.Engine(store, flows=[flow])
    expired: list[tuple[str, str, str]] = []
    claims: list[dict[str, Any]] = []
    trips: list[str] = []
    real_expire, real_claim, real_io = store.expire_lease, store.claim, fresh.io

    def expire_lease(tenant_id: str, run_id: str, owner: str) -> int:
        expired.append((tenant_id, run_id, owner))
        return real_expire(tenant_id, run_id, owner)

    def claim(**kwargs: Any) -> Any:
        claims.append(kwargs)
        return real_claim(**kwargs)

    async def io(fn: Callable[..., Any], *args: Any) -> Any:
        if not entered:  # the trips before the first step
            name = fn.func.__name__ if isinstance(fn, functools.partial) else fn.__name__
            trips.append(name)
        return await real_io(fn, *args)

    entered.clear()
    store.expire_lease = expire_lease  # type: ignore[method-assign]
    store.claim = claim  # type: ignore[method-assign]
    fresh.io = io  # type: ignore[method-assign]
    try:
        state = asyncio.run(uw.Runner(fresh).run_until_complete(run_id))
    finally:
        del store.expire_lease, store.claim
    assert state.status == "completed" and entered == [0, 1, 2]
    assert expired == []  # no commit of its own
    assert claims[0]["expire"] == [("default", run_id, dead_owner())]
    assert claims[0]["run_id"] == run_id
    assert trips == ["_repair_and_claim"]  # the load made no trip of its own
