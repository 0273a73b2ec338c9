"""A tool's ``compensate`` hook undoes a completed call: ``ctx.call(t.compensation(),
{"args": ..., "result": ...})`` runs it through the effect ledger like any mutating call —
allowed wherever the tool is, with its own idempotency key, once, even across a crash."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.testing import memory_engine

HELD: list[str] = []
RELEASED: list[dict[str, Any]] = []


class Crash(SystemExit):
    """Abandons an activation, as a SIGKILL would: the process stopping is no answer of
    the hook's (any other exception from it escalates, see tests/adversarial/test_hooks.py)."""


class Seat(BaseModel):
    flight: str
    seat: str


class Trip(BaseModel):
    crash_in_undo: bool = False


class Booked(BaseModel):
    hold: dict[str, Any] = {}


@uw.tool(mutating=True, idempotent=True)
async def hold_seat(args: Seat, info: uw.CallInfo) -> dict[str, Any]:
    """Hold a seat (the airline deduplicates by key)."""
    HELD.append(info.key)
    return {"hold_id": f"h-{len(HELD)}"}


@hold_seat.compensator
async def release_seat(payload: dict[str, Any], info: uw.CallInfo) -> dict[str, Any]:
    RELEASED.append({"payload": payload, "key": info.key})
    if payload["args"]["seat"] == "13C" and len(RELEASED) == 1:
        raise Crash  # the release went out; the worker died before recording it
    return {"released": payload["result"]["hold_id"]}


@uw.tool(mutating=True)
async def charge(args: Any) -> dict[str, Any]:
    """The card is declined."""
    raise RuntimeError("card declined")


trips: uw.Flow[Booked, Trip] = uw.Flow("trip", state=Booked, input=Trip,
                                       tools=[hold_seat, charge])


@trips.step
async def book(ctx: uw.RunContext[Booked, Trip]) -> Any:
    seat = {"flight": "AI-101", "seat": "13C" if ctx.input.crash_in_undo else "12A"}
    ctx.state.hold = {"args": seat, "result": await ctx.call(hold_seat, seat)}
    return ctx.goto(pay)


@trips.step
async def pay(ctx: uw.RunContext[Booked, Trip]) -> Any:
    try:
        await ctx.call(charge, {"amount": 5400})
    except uw.ToolCallError:
        undone = await ctx.call(hold_seat.compensation(), ctx.state.hold)
        return ctx.done({"rolled_back": undone})
    return ctx.done("paid")


@pytest.fixture(autouse=True)
def fresh() -> None:
    HELD.clear()
    RELEASED.clear()


def test_a_failed_trip_releases_its_seat_through_the_ledger() -> None:
    engine, _ = memory_engine([trips])
    run_id, _ = engine.start(trips, {})
    s = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert s.status == "completed" and s.result == {"rolled_back": {"released": "h-1"}}
    [undo] = RELEASED
    assert undo["payload"] == {"args": {"flight": "AI-101", "seat": "12A"},
                               "result": {"hold_id": "h-1"}}
    started = [r.event for r in engine.journal.history("default", run_id)
               if isinstance(r.event, ev.ToolStarted)]
    assert [e.tool for e in started] == ["hold_seat", "charge", "hold_seat.compensate"]
    assert started[2].key == undo["key"] and started[2].key != started[0].key


def test_a_crash_during_the_undo_repeats_it_with_the_same_key() -> None:
    engine, clock = memory_engine([trips])
    run_id, _ = engine.start(trips, {"crash_in_undo": True})
    with pytest.raises(Crash):
        asyncio.run(uw.Runner(engine).run_until_idle())
    clock.advance(engine.lease_ttl + 1)
    s = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert s.status == "completed" and s.result == {"rolled_back": {"released": "h-1"}}
    assert len(RELEASED) == 2 and RELEASED[0]["key"] == RELEASED[1]["key"]  # idempotent retry
    assert len(HELD) == 1  # the completed hold was not run again


def test_a_tool_without_a_hook_has_no_compensation() -> None:
    with pytest.raises(uw.ConfigurationError, match="tool 'charge' has no compensate hook"):
        charge.compensation()


def test_the_undo_of_a_tool_off_the_allow_list_is_refused() -> None:
    narrow: uw.Flow[Booked, Any] = uw.Flow("narrow", state=Booked, tools=["charge"])

    @narrow.step
    async def undo(ctx: uw.RunContext[Booked, Any]) -> Any:
        try:
            await ctx.call(hold_seat.compensation(), {"args": {}, "result": {}})
        except uw.ToolCallError as exc:
            return ctx.done(exc.error_type)
        return ctx.done("ran")

    engine, _ = memory_engine([narrow, trips])
    run_id, _ = engine.start(narrow)
    s = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert s.result == "ToolNotAllowed" and RELEASED == []
