"""What the config-file tests run: ``underway worker --config FILE`` whose ``[worker] app``
is ``config_app:app`` (this folder is the worker's current directory). A refund the
policy holds for a finance approver, and a mailer that sends two messages in one step."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from underway import Flow, RunContext, tool
from underway.flow import Next


class Done(BaseModel):
    """How far the run got."""

    sent: int = 0
    refunded: bool = False


@tool(mutating=True, idempotent=True, amount="amount", currency="EUR")
async def issue_refund(args: Any) -> dict[str, Any]:
    """Would move money back to a customer."""
    return {"refunded": args["amount"]}


@tool(idempotent=True, message=True)
async def send_message(args: Any) -> dict[str, Any]:
    """Would message a customer."""
    return {"sent": args["n"]}


refund: Flow[Done, Any] = Flow("refund", state=Done, tools=[issue_refund])


@refund.step
async def pay_back(ctx: RunContext[Done, Any]) -> Next:
    await ctx.call(issue_refund, {"customer": "c-17", "amount": 1200})
    ctx.state.refunded = True
    return ctx.done()


mailer: Flow[Done, Any] = Flow("mailer", state=Done, tools=[send_message])


@mailer.step
async def send_two(ctx: RunContext[Done, Any]) -> Next:
    for n in range(2):
        await ctx.call(send_message, {"n": n})
        ctx.state.sent += 1
    return ctx.done(ctx.state.sent)


app: list[Any] = [refund, mailer]
