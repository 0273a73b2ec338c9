"""Tools that move money, declared in each way the docs show, and a flow that calls them
from its input; importable as ``--app money_tools:APP`` by ``underway policy explain``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel

import underway as uw


class Refund(BaseModel):
    invoice: str = "INV-7"
    amount: float
    currency: str = "INR"


class FixedRefund(BaseModel):
    invoice: str = "INV-7"
    amount: float


class Payout(BaseModel):
    amount: Decimal
    currency: str = "INR"


executed: list[tuple[str, Any]] = []
"""Every call that reached a tool's code: (tool, amount)."""


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def issue_refund(args: Refund) -> dict[str, Any]:
    """docs/tools.md's pattern: the currency is an argument with a default."""
    executed.append(("issue_refund", args.amount))
    return {"refunded": args.amount}


@uw.tool(irreversible=True, amount="amount", currency="INR")
async def readme_refund(args: FixedRefund) -> dict[str, Any]:
    """The README's pattern: a fixed currency."""
    executed.append(("readme_refund", args.amount))
    return {"refunded": args.amount}


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def transfer(args: dict[str, Any]) -> dict[str, Any]:
    """No argument model: the guard sees the raw JSON."""
    executed.append(("transfer", args.get("amount")))
    return {"moved": True}


@uw.tool(irreversible=True, amount="amount", currency="arg:currency", money_direction="out")
async def payout(args: Payout) -> dict[str, Any]:
    """Only pays out: a negative amount is refused."""
    executed.append(("payout", args.amount))
    return {"paid": str(args.amount)}


TOOLS = [issue_refund, readme_refund, transfer, payout]


class Calls(BaseModel):
    calls: list[tuple[str, Any]] = []


class Outcomes(BaseModel):
    outcomes: list[Any] = []


calls = uw.Flow("money_calls", state=Outcomes, input=Calls, tools=tuple(TOOLS))


@calls.step
async def go(ctx: uw.RunContext[Outcomes, Calls]) -> Any:
    """Make each call of the input in turn; a refusal is an outcome, not an error."""
    for name, args in ctx.input.calls:
        try:
            await ctx.call(name, args)
            ctx.state.outcomes.append("ran")
        except uw.ToolCallError as exc:
            ctx.state.outcomes.append([exc.error_type, exc.message])
    return ctx.done(ctx.state.outcomes)


APP = [calls, *TOOLS]
