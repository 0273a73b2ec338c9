"""Poison runs never hot-loop: whatever goes wrong inside a step is journaled and the run
ends dead-lettered (or the error reaches the step), and a run handed back after a failure
is not due again at once. On SQLite and PostgreSQL, with a real worker where it matters."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from typing import Any

import pytest
from insider import insider
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.clock import ManualClock
from underway.engine import Engine
from underway.guard.policy import policy_from_dict
from underway.runner import Runner
from underway.store import connect
from underway.worker import POISON_AFTER, Worker


class S(BaseModel):
    n: int = 0
    error: str | None = None


POISONS = ["datetime_result", "nan_result", "object_evidence",
           "bytes_in_result"]


def _poison_flow(kind: str, reads: list[int]) -> uw.Flow[Any, Any]:
    @uw.tool(read_only=True)
    async def look(args: dict[str, Any]) -> dict[str, Any]:
        reads.append(1)
        return {"balance": 10}

    @uw.tool(irreversible=True)
    async def pay(args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    flow = uw.Flow(f"poison-{kind.replace('_', '-')}", state=S, tools=[look, pay])

    @flow.step
    async def go(ctx: Any) -> Any:
        await ctx.call(look, {})
        if kind == "datetime_result":
            return ctx.done({"at": dt.datetime.now(dt.UTC)})
        if kind == "nan_result":
            return ctx.done({"ratio": float("nan")})
        if kind == "bytes_in_result":
            return ctx.done({"raw": b"\x00"})
        await ctx.call(pay, {"to": "A"}, evidence={"seen": object()})
        return ctx.done(None)

    return flow


@pytest.mark.parametrize("kind", POISONS)
def test_a_step_producing_what_cannot_be_journaled_is_dead_lettered_once(
    db_url: str, kind: str
) -> None:
    reads: list[int] = []
    flow = _poison_flow(kind, reads)
    policy = policy_from_dict({"version": "v", "rules": [
        {"id": "ask", "tools": ["pay"], "outcome": "require_approval"}]})
    engine = Engine(connect(db_url), flows=[flow], clock=ManualClock(), policy=policy)
    run_id, _ = engine.start(flow)
    for _ in range(3):
        asyncio.run(Runner(engine).run_until_idle())
    s = engine.state(run_id)
    assert s.status == "dead", s
    assert reads == [1], f"the read-only tool ran {len(reads)} times"
    dead = [r.event for r in engine.journal.history("default", run_id)
            if isinstance(r.event, ev.RunDeadLettered)]
    assert len(dead) == 1 and dead[0].step == "go"
    # Refused as it was made (evidence the event cannot hold) or dropped at the commit.
    assert any(word in dead[0].reason for word in ("JSON", "journaled", "GuardError"))
    assert engine.store.get_run("default", run_id).status == "dead"  # type: ignore[union-attr]


def test_a_guard_that_cannot_decide_refuses_the_call(db_url: str) -> None:
    calls: list[int] = []

    @uw.tool(irreversible=True)
    async def wipe(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {}

    flow = uw.Flow("guard-breaks", state=S, tools=[wipe])

    @flow.step
    async def go(ctx: Any) -> Any:
        try:
            await ctx.call(wipe, {"account": "A"})
        except uw.ToolCallError as exc:
            ctx.state.error = exc.error_type
        return ctx.done(ctx.state.error)

    class Broken:
        """A policy whose evaluation raises (a bug in a custom rule)."""

        digest = version = "broken"

        def evaluate(self, *args: Any, **kwargs: Any) -> Any:
            raise ZeroDivisionError("custom rule divided by zero")

    engine = Engine(connect(db_url), flows=[flow], clock=ManualClock())
    engine.guard.policy = Broken()  # type: ignore[assignment]
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    s = engine.state(run_id)
    assert calls == [] and (s.status, s.result, s.error) == ("completed", "GuardError", None)
    refused = [r.event for r in engine.journal.history("default", run_id)
               if isinstance(r.event, ev.ToolRefused)]
    assert [e.cause for e in refused] == ["guard_error"]
    assert "ZeroDivisionError" in refused[0].reason


def test_a_run_the_worker_cannot_advance_backs_off_then_is_dead_lettered(db_url: str) -> None:
    """An activation that fails outside any step (here: an insider wrote a signal payload
    that is not JSON) is handed back later each time, and after a bounded number of
    failures the run is journaled dead — never claimed in a tight loop."""
    flow = uw.Flow("waits", state=S)

    @flow.step
    async def wait(ctx: Any) -> Any:
        return ctx.wait("go", then="end")

    @flow.step
    async def end(ctx: Any) -> Any:
        return ctx.done("ended")

    store = connect(db_url)
    engine = Engine(store, flows=[flow])
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    engine.signal(run_id, "go", {"ok": True})
    with insider(db_url) as sql:
        sql.q("UPDATE signals SET payload = ? WHERE run_id = ?", "{not json", run_id)
    claims: list[float] = []
    real_claim = store.claim

    def counting_claim(**kw: Any) -> Any:
        leases = real_claim(**kw)
        claims.extend(kw["now"] for lease in leases if lease.run_id == run_id)
        return leases

    store.claim = counting_claim  # type: ignore[method-assign]

    async def serve() -> None:
        worker = Worker(engine, poll=0.05, min_poll=0.01, listen=False)
        task = asyncio.create_task(worker.run())
        while (row := store.get_run("default", run_id)) is None or row.status != "dead":
            await asyncio.sleep(0.05)
        worker.stop(now=True)
        await task

    asyncio.run(asyncio.wait_for(serve(), timeout=300))
    assert len(claims) == POISON_AFTER
    # Each hand-back pushed the next claim later (exponential back-off).
    gaps = [b - a for a, b in itertools.pairwise(claims)]
    assert all(g >= 0.2 for g in gaps), gaps
    dead = [r.event for r in engine.journal.history("default", run_id)
            if isinstance(r.event, ev.RunDeadLettered)]
    assert len(dead) == 1 and f"failed {POISON_AFTER} times" in dead[0].reason


def test_a_hand_back_after_a_failure_is_not_due_at_once(db_url: str) -> None:
    flow = uw.Flow("handback", state=S)

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.done(None)

    clock = ManualClock()
    engine = Engine(connect(db_url), flows=[flow], clock=clock)
    run_id, _ = engine.start(flow)
    (lease,) = engine.claim()
    engine.store.release(lease, retry_at=clock.now() + 30)
    assert engine.claim() == []
    clock.advance(31)
    assert [le.run_id for le in engine.claim()] == [run_id]


@pytest.mark.parametrize("waits", ["signal", "timer", "finished"])
def test_a_row_that_says_due_when_the_journal_does_not_is_not_claimed_in_a_loop(
    db_url: str, waits: str
) -> None:
    flow = uw.Flow(f"row-lies-{waits}", state=S)

    @flow.step
    async def first(ctx: Any) -> Any:
        if waits == "signal":
            return ctx.wait("go", then="end")
        if waits == "timer":
            return ctx.sleep(3600, then="end")
        return ctx.done("ok")

    @flow.step
    async def end(ctx: Any) -> Any:
        return ctx.done("ended")

    store = connect(db_url)
    clock = ManualClock()
    engine = Engine(store, flows=[flow], clock=clock)
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    before = engine.state(run_id)
    with insider(db_url) as sql:
        sql.q("UPDATE runs SET status = 'ready', next_wake_at = 0 WHERE run_id = ?", run_id)
    claims: list[str] = []
    real_claim = store.claim

    def counting_claim(**kw: Any) -> Any:
        leases = real_claim(**kw)
        claims.extend(lease.run_id for lease in leases)
        if len(claims) > 3:
            raise AssertionError("claimed in a loop")
        return leases

    store.claim = counting_claim  # type: ignore[method-assign]
    asyncio.run(Runner(engine).run_until_idle())
    assert claims == [run_id]
    after = engine.state(run_id)
    assert (after.status, after.seq) == (before.status, before.seq)
    # The row was rewritten from the journal: not due again before the journal says.
    row = store.get_run("default", run_id)
    assert row is not None and row.status == before.status
    if waits == "timer":
        assert row.next_wake_at == before.wake_at
    else:
        assert row.next_wake_at is None

