"""``ctx.call`` returns a tool's declared result model, validated from the journaled JSON
on the first run and on every replay; a journaled result that no longer fits the model
stops the run naming the tool, the call and the fields."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.engine import Engine
from underway.errors import ResultInvalid
from underway.testing import memory_engine


class Crash(BaseException):
    """Raised to abandon an activation mid-flight, as a SIGKILL would."""


class Quote(BaseModel):
    sku: str


class Price(BaseModel):
    sku: str
    cents: int


class PriceV2(BaseModel):
    sku: str
    cents: int
    currency: str


class S(BaseModel):
    seen: list[Any] = []


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def crash_then_resume(flow: uw.Flow[Any, Any], *, between: Any = None) -> tuple[Engine, str]:
    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    with pytest.raises(Crash):
        run(uw.Runner(engine).run_until_idle())
    if between is not None:
        between()
    clock.advance(engine.lease_ttl + 1)
    run(uw.Runner(engine).run_until_idle())
    return engine, run_id


def typed_flow() -> tuple[uw.Flow[S, Any], uw.Tool[Quote, Price], list[Any], list[Any]]:
    executed: list[Any] = []
    returned: list[Any] = []

    @uw.tool
    async def price(args: Quote) -> Price:
        executed.append(args.sku)
        return Price(sku=args.sku, cents=1250)

    @uw.tool(idempotent=True)
    async def note(args: dict[str, Any]) -> dict[str, Any]:
        return {"noted": args["text"]}

    flow = uw.Flow("typed", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        p = await ctx.call(price, Quote(sku="A-1"))
        returned.append(p)
        noted = await ctx.call(note, {"text": p.sku})  # commits the first call's outcome
        returned.append(noted)
        if len(returned) == 2:
            raise Crash
        return ctx.done({"cents": p.cents})

    return flow, price, executed, returned


def test_a_typed_tool_returns_its_model_first_and_on_replay_after_a_crash() -> None:
    flow, _, executed, returned = typed_flow()
    engine, run_id = crash_then_resume(flow)
    s = engine.state(run_id)
    assert s.status == "completed", s
    assert s.result == {"cents": 1250}
    assert executed == ["A-1"]  # replayed from the journal, not run again
    first, first_note, replayed, replayed_note = returned
    assert isinstance(first, Price) and isinstance(replayed, Price)
    assert first == replayed == Price(sku="A-1", cents=1250)
    # An untyped tool stays JSON.
    assert first_note == replayed_note == {"noted": "A-1"}
    # The journal keeps JSON.
    (ok,) = [r.event for r in engine.journal.history("default", run_id)
             if isinstance(r.event, ev.ToolSucceeded) and r.event.tool == "price"]
    assert ok.result == {"sku": "A-1", "cents": 1250}


def test_a_journaled_result_that_no_longer_validates_stops_the_run_naming_it() -> None:
    flow, price, executed, returned = typed_flow()

    def code_changed() -> None:
        object.__setattr__(price, "result_model", PriceV2)

    engine, run_id = crash_then_resume(flow, between=code_changed)
    s = engine.state(run_id)
    assert s.status == "dead", s
    assert executed == ["A-1"]
    assert len(returned) == 2  # never handed a dict in place of the model
    dead = [r.event for r in engine.journal.history("default", run_id)
            if isinstance(r.event, ev.RunDeadLettered)]
    assert dead and dead[-1].error_type == "ResultInvalid"
    assert "'price'" in dead[-1].reason and f"{run_id}:0:go:0" in dead[-1].reason
    assert "currency" in dead[-1].reason


def test_parse_result_names_tool_key_and_fields() -> None:
    @uw.tool
    async def price(args: Quote) -> PriceV2:
        return PriceV2(sku=args.sku, cents=1, currency="INR")

    assert price.parse_result({"sku": "x", "cents": 1, "currency": "INR"}, key="k") == \
        PriceV2(sku="x", cents=1, currency="INR")
    with pytest.raises(ResultInvalid) as info:
        price.parse_result({"sku": "x", "cents": "many"}, key="r:0:go:0")
    assert info.value.tool == "price" and info.value.key == "r:0:go:0"
    assert info.value.fields == ["cents", "currency"]


def test_a_tool_called_by_name_gives_json() -> None:
    @uw.tool(read_only=True)
    async def price(args: Quote) -> Price:
        return Price(sku=args.sku, cents=5)

    flow = uw.Flow("by-name", state=S, tools=[price])
    got: list[Any] = []

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        got.append(await ctx.call("price", {"sku": "B"}))
        got.append(await ctx.call(price, {"sku": "B"}))
        return ctx.done(None)

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed"
    assert got == [{"sku": "B", "cents": 5}, Price(sku="B", cents=5)]


def test_a_tool_of_no_arguments_is_called_with_none_and_refuses_any() -> None:
    @uw.tool(read_only=True)
    async def today() -> Price:
        return Price(sku="day", cents=1)

    @uw.tool(idempotent=True)
    def tick() -> dict[str, int]:
        return {"ticks": 1}

    flow = uw.Flow("no-args", state=S, tools=[today, tick])
    got: list[Any] = []

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        got.append(await ctx.call(today))
        got.append(await ctx.call(tick, {}))
        try:
            await ctx.call(today, {"sku": "smuggled"})
        except uw.ToolCallError as exc:
            got.append(exc.error_type)
        return ctx.done(None)

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed"
    assert got == [Price(sku="day", cents=1), {"ticks": 1}, "SchemaValidationFailed"]
    [refused] = [r.event for r in engine.client.history(run_id)
                 if isinstance(r.event, ev.SchemaValidationFailed)]
    assert refused.tool == "today" and refused.errors[0]["type"] == "extra_forbidden"
    # What a model is shown: an object with no properties and nothing else allowed.
    assert today.spec()["parameters"]["properties"] == {}
    assert today.spec()["parameters"]["additionalProperties"] is False
