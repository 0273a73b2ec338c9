"""What the residency tests run: ``underway worker --app residency_app:app`` (from this
folder) and the intake routes of ``residency_app:routes``.

A visit looks the customer up (a read-only tool), records a note (a mutating tool, behind
a policy that needs the subject's ``service`` consent) and finishes with both."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from underway import Flow, RunContext, tool
from underway.flow import Next
from underway.scheduling.intake import Routes, StartFlow


class Visit(BaseModel):
    """Who is visited."""

    customer: str


class Notes(BaseModel):
    """What the visit found and wrote."""

    found: str = ""
    noted: bool = False


@tool(mutating=False)
async def look_up(args: dict[str, Any]) -> dict[str, Any]:
    """Find the customer."""
    return {"name": f"customer {args['customer']}"}


@tool(idempotent=True)
async def note(args: dict[str, Any]) -> dict[str, Any]:
    """Write a note about the customer."""
    return {"noted": args["customer"]}


visit: Flow[Notes, Visit] = Flow("visit", state=Notes, input=Visit, tools=[look_up, note])


@visit.step
async def go(ctx: RunContext[Notes, Visit]) -> Next:
    found = await ctx.call(look_up, {"customer": ctx.input.customer})
    ctx.state.found = found["name"]
    await ctx.call(note, {"customer": ctx.input.customer})
    ctx.state.noted = True
    return ctx.done({"found": ctx.state.found})


app = [visit]
routes = Routes({"customer.visited": StartFlow("visit", subject_from="payload.customer",
                                               purpose="service")})
