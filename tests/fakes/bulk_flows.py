"""Flows the bulk-operation tests drive: ``brittle`` dies until ``OUTAGE`` is cleared (an
outage that killed runs), ``asking`` asks every run the same question, ``lost`` loses
track of an irreversible call and escalates for a resolution."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.errors import OutcomeUnknown

OUTAGE: list[bool] = [True]
"""While it holds True, ``brittle`` fails (and its runs die)."""
QUESTION = "Which warehouse ships it?"


class Order(BaseModel):
    sku: str = "SKU-1"


class Notes(BaseModel):
    tries: int = 0


@uw.tool(read_only=True, retry=uw.RetryPolicy(max_attempts=1))
async def supplier(args: Order) -> dict[str, Any]:
    """The supplier's stock, or a 503 during the outage."""
    if OUTAGE[0]:
        raise RuntimeError("supplier answered 503")
    return {"stock": 4, "sku": args.sku}


brittle: uw.Flow[Notes, Order] = uw.Flow("brittle", state=Notes, input=Order,
                                         tools=[supplier])


@brittle.step
async def check_stock(ctx: uw.RunContext[Notes, Order]) -> Any:
    ctx.state.tries += 1
    return ctx.done(await ctx.call(supplier, ctx.input.model_dump()))


asking: uw.Flow[Notes, Order] = uw.Flow("asking", state=Notes, input=Order)


@asking.step
async def ask(ctx: uw.RunContext[Notes, Order]) -> Any:
    answer = await ctx.ask(QUESTION, context={"sku": ctx.input.sku}, role="support")
    return ctx.done({"sku": ctx.input.sku, "warehouse": answer})


@uw.tool(irreversible=True)
async def transfer(args: Order) -> dict[str, Any]:
    """A transfer whose answer is lost on the way back."""
    raise OutcomeUnknown("connection closed after the request was sent")


lost: uw.Flow[Notes, Order] = uw.Flow("lost", state=Notes, input=Order, tools=[transfer])


@lost.step
async def pay(ctx: uw.RunContext[Notes, Order]) -> Any:
    return ctx.done(await ctx.call(transfer, ctx.input.model_dump()))


FLOWS: list[uw.Flow[Any, Any]] = [brittle, asking, lost]
