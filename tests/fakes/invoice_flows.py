"""Two small invoice flows that the client and service tests drive: ``reminders`` waits for a
``paid`` signal; ``refunds`` calls an irreversible ``refund`` that its policy holds for a
signed approval by the ``finance`` role."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.guard.policy import policy_from_dict


class Invoice(BaseModel):
    invoice: str
    amount: int


class Notes(BaseModel):
    seen: list[str] = []


@uw.tool(irreversible=True)
async def refund(args: Invoice) -> dict[str, Any]:
    """Refund an invoice."""
    return {"refunded": args.invoice}


reminders: uw.Flow[Notes, Invoice] = uw.Flow("reminders", state=Notes, input=Invoice,
                                             signals=["paid"])


@reminders.step
async def remind(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    ctx.state.seen.append(ctx.input.invoice)
    return ctx.wait("paid", then=settle)


@reminders.step
async def settle(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    return ctx.done({"paid": ctx.signal})


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "refunds", "tools": ["refund"], "outcome": "require_approval",
     "approver_role": "finance", "expires_in": 3600},
]})
refunds: uw.Flow[Notes, Invoice] = uw.Flow("refunds", state=Notes, input=Invoice,
                                           tools=[refund], policy=POLICY)


@refunds.step
async def pay_back(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    return ctx.done(await ctx.call(
        refund, ctx.input.model_dump(),
        evidence={"invoice": ctx.input.invoice, "paid_twice": True},
        risks=["money leaves the company", "a refund cannot be undone"]))
