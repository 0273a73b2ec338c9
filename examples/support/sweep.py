"""The SLA sweep: a plain flow, started by a cron schedule, that escalates every ticket
whose first response is overdue or about to be.

It catches what no agent is handling: tickets from before the monitor ran, a ticket whose
reply waits on an approval nobody gives, a ticket whose agent run is stuck. One sweep is
one short run; the schedule starts one per tick (``*/5 * * * *``: every five minutes),
and each tick's run is started once even when several workers fire schedules.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from underway import Engine, Flow, RunContext
from underway.flow import Next
from underway.guard.policy import Policy
from underway.scheduling.schedules import Schedule, add_schedule

from .tools import DeskTools, OpenTickets

SCHEDULE = "support-sla-sweep"
EVERY_FIVE_MINUTES = "*/5 * * * *"


class SweepInput(BaseModel):
    """How close to its due time a ticket counts as at risk."""

    warn_within_s: float = 1800.0


class SweepState(BaseModel):
    """What the sweep found and escalated."""

    breached: list[str] = []
    at_risk: list[str] = []


def make_sweep(tools: DeskTools, policy: Policy) -> Flow[SweepState, SweepInput]:
    """The sweep flow over the desk's tools."""
    flow: Flow[SweepState, SweepInput] = Flow(
        "support_sla_sweep", state=SweepState, input=SweepInput, policy=policy,
        tools=[tools.list_open_tickets, tools.escalate_ticket],
    )

    @flow.step(start=True)
    async def sweep(ctx: RunContext[SweepState, SweepInput]) -> Next:
        """List open tickets; escalate those without a first response that are past, or
        within ``warn_within_s`` of, their SLA due time."""
        now = ctx.now().timestamp()
        listed = OpenTickets.model_validate(await ctx.call(tools.list_open_tickets, {}))
        for t in listed.tickets:
            if t.first_response_at is not None or t.status == "escalated":
                continue
            due = datetime.fromtimestamp(t.sla_due, UTC).strftime("%Y-%m-%d %H:%M UTC")
            if t.sla_due <= now:
                ctx.state.breached.append(t.id)
                reason = f"SLA breached: the first response was due at {due}"
            elif t.sla_due - now <= ctx.input.warn_within_s:
                ctx.state.at_risk.append(t.id)
                reason = (f"SLA at risk: the first response is due at {due}, in "
                          f"{(t.sla_due - now) / 60:.0f} minutes")
            else:
                continue
            await ctx.call(tools.escalate_ticket, {"ticket_id": t.id, "reason": reason})
        result: dict[str, Any] = {"checked": len(listed.tickets), **ctx.state.model_dump()}
        return ctx.done(result)

    return flow


def install_schedule(engine: Engine, sweep: Flow[SweepState, SweepInput], *,
                     cron: str = EVERY_FIVE_MINUTES, timezone: str = "UTC") -> Schedule:
    """Declare the sweep's schedule (again at every start-up: a pending tick is kept)."""
    return add_schedule(engine, SCHEDULE, sweep, cron, SweepInput(), timezone=timezone)
