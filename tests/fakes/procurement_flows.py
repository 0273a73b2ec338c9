"""Flows of a procurement desk for the approval tests: ``procure`` pays a supplier through a
tool whose declaration reads the money and writes the summary; ``lease`` renews a lease
with the step's own ``summary=``; ``restock`` asks procurement which warehouse to use;
``expenses`` reimburses a payee whose name the tool declares sensitive."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.guard.policy import policy_from_dict


class Supplier(BaseModel):
    name: str
    gstin: str = ""


class Order(BaseModel):
    po: str
    supplier: Supplier
    amount: Decimal
    currency: str = "INR"
    from_account: str = "HDFC-OPS-0042"


class Notes(BaseModel):
    answers: list[Any] = []


class Site(BaseModel):
    site: str


class Sku(BaseModel):
    sku: str


@uw.tool(irreversible=True, amount="amount", currency="arg:currency", money_direction="out",
         account="from_account", summary="Pay {amount:money} to {supplier.name} for {po}")
async def pay_supplier(args: Order) -> dict[str, Any]:
    """Pay a supplier for a purchase order."""
    return {"paid": args.po}


class Reimbursement(BaseModel):
    payee: str
    amount: Decimal


@uw.tool(irreversible=True, amount="amount", currency="INR", money_direction="out",
         sensitive=("payee",), summary="Reimburse {payee} {amount:money}")
async def reimburse(args: Reimbursement) -> dict[str, Any]:
    """Reimburse an employee."""
    return {"paid": args.payee}


@uw.tool(irreversible=True)
async def renew_lease(args: dict[str, Any]) -> dict[str, Any]:
    """Renew a lease."""
    return {"renewed": args["site"]}


POLICY = policy_from_dict({"version": "p1", "rules": [
    {"id": "payments", "tools": ["pay_supplier", "renew_lease", "reimburse"],
     "outcome": "require_approval", "approver_role": "procurement", "expires_in": 3600},
]})

procure: uw.Flow[Notes, Order] = uw.Flow("procure", state=Notes, input=Order,
                                         tools=[pay_supplier], policy=POLICY)


@procure.step
async def pay(ctx: uw.RunContext[Notes, Order]) -> Any:
    return ctx.done(await ctx.call(
        pay_supplier, ctx.input,
        evidence={"po": ctx.input.po, "goods_received": True, "invoice_matches": True},
        risks=["money leaves the company", "a payment cannot be recalled"]))


lease: uw.Flow[Notes, Site] = uw.Flow("lease", state=Notes, input=Site, tools=[renew_lease],
                                      policy=POLICY)


@lease.step
async def renew(ctx: uw.RunContext[Notes, Site]) -> Any:
    site = ctx.input.site
    return ctx.done(await ctx.call(
        renew_lease, {"site": site, "years": 3},
        summary=f"Renew the lease of\n  {site} for three years",
        evidence={"rent_change": "+4%"}, risks=["a three-year commitment"]))


restock: uw.Flow[Notes, Sku] = uw.Flow("restock", state=Notes, input=Sku)


@restock.step
async def ask(ctx: uw.RunContext[Notes, Sku]) -> Any:
    answer = await ctx.ask(f"Which warehouse restocks {ctx.input.sku}?",
                           context={"sku": ctx.input.sku}, role="procurement")
    return ctx.done({"warehouse": answer})


expenses: uw.Flow[Notes, Reimbursement] = uw.Flow(
    "expenses", state=Notes, input=Reimbursement, tools=[reimburse], policy=POLICY)


@expenses.step
async def settle(ctx: uw.RunContext[Notes, Reimbursement]) -> Any:
    return ctx.done(await ctx.call(reimburse, ctx.input))


FLOWS = [procure, lease, restock, expenses]
