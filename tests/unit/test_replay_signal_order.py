"""A replay gives signals and timers in the journal's order: a signal that arrived after a
wait timed out goes to the wait that got it, never to the earlier one."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.engine import Engine
from underway.ops.replay import replay_run
from underway.runner import Runner
from underway.testing import ManualClock, MemoryStore


class Order(BaseModel):
    seen: list[Any] = []


@uw.tool
async def notify_procurement(args: Any) -> dict[str, Any]:
    return {"told": True}


def order_flow() -> uw.Flow[Order, Any]:
    flow = uw.Flow("order", state=Order, tools=[notify_procurement])

    @flow.step(start=True)
    async def ask_supplier(ctx: uw.RunContext[Order, Any]) -> Any:
        return ctx.wait("supplier", timeout=60, then=check)

    @flow.step
    async def check(ctx: uw.RunContext[Order, Any]) -> Any:
        ctx.state.seen.append({"timed_out": ctx.timed_out, "signal": ctx.signal})
        if ctx.timed_out:
            await ctx.call(notify_procurement, {"why": "no answer in time"})
            return ctx.wait("supplier", timeout=3600, then=check)
        return ctx.done(ctx.state.seen)

    return flow


def drive(engine: Engine) -> None:
    asyncio.run(Runner(engine).run_until_idle())


def test_a_late_signal_is_not_given_to_the_wait_that_timed_out() -> None:
    store = MemoryStore()
    store.migrate()
    clock = ManualClock(1.7e9)
    engine = Engine(store, flows=[order_flow()], clock=clock)
    run_id, _ = engine.start("order")
    drive(engine)
    clock.advance(61)
    drive(engine)  # the first wait times out; procurement is told; it waits again
    engine.signal(run_id, "supplier", {"ships": "monday"}, signal_id="late-1")
    drive(engine)
    done = engine.state(run_id)
    assert done.status == "completed"
    assert done.result == [{"timed_out": True, "signal": None},
                           {"timed_out": False, "signal": {"ships": "monday"}}]

    result = asyncio.run(replay_run(store, run_id, flows=[order_flow()]))
    assert result.stopped is None, result.stopped
    assert result.changes == []
    assert result.replay.result == done.result
    assert [c.tool for c in result.replay.calls] == ["notify_procurement"]


def test_a_signal_that_came_in_time_is_given_before_the_timer() -> None:
    store = MemoryStore()
    store.migrate()
    engine = Engine(store, flows=[order_flow()], clock=ManualClock(1.7e9))
    run_id, _ = engine.start("order")
    drive(engine)
    engine.signal(run_id, "supplier", {"ships": "today"}, signal_id="on-time")
    drive(engine)
    assert engine.state(run_id).result == [{"timed_out": False,
                                            "signal": {"ships": "today"}}]
    result = asyncio.run(replay_run(store, run_id, flows=[order_flow()]))
    assert result.changes == [] and result.replay.result == engine.state(run_id).result
    assert result.replay.calls == []


def test_a_run_cancelled_while_it_waited_is_cancelled_there_in_the_replay() -> None:
    store = MemoryStore()
    store.migrate()
    engine = Engine(store, flows=[order_flow()], clock=ManualClock(1.7e9))
    run_id, _ = engine.start("order")
    drive(engine)
    engine.client.cancel(run_id, by="ops", reason="supplier gone")
    drive(engine)
    assert engine.state(run_id).status == "cancelled"
    result = asyncio.run(replay_run(store, run_id, flows=[order_flow()]))
    # Not timed out and carried on to tell procurement: cancelled where the original was.
    assert result.changes == [] and result.stopped is None
    assert (result.replay.status, result.replay.error) == ("cancelled", "supplier gone")
    assert result.replay.calls == []
