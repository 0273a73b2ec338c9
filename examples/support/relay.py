"""From the desk's event feed to underway's intake: new tickets start agent runs, customer
replies signal the run that owns the ticket.

The relay is what a webhook endpoint would be: it reads desk events after a cursor and
hands each to :func:`underway.scheduling.intake.intake` as an
:class:`~underway.scheduling.intake.IntakeEvent` whose idempotency key is the desk's
event number. Delivering an event twice (a webhook retried, a relay restarted from an old
cursor) does nothing the second time.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from underway import Client, Flow
from underway.scheduling.intake import IntakeEvent, IntakeResult, Routes, Signal, StartFlow, intake

from .agent import CUSTOMER_REPLIED
from .helpcenter import TENANT

CREATED = "ticket.created"
REPLIED = "ticket.customer_replied"


def ticket_goal(event: IntakeEvent) -> dict[str, Any]:
    """The agent run's input for a new ticket: a goal, and the desk-owned fields (never
    what the customer wrote: that is read through the untrusted ``read_ticket`` tool)."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    t = payload["ticket"]
    return {
        "goal": f"Handle support ticket {t['id']} from {t['customer']}: answer it from the "
                "help center, ask for missing details, escalate what you cannot settle.",
        "context": {"ticket_id": t["id"], "customer": t["customer"],
                    "priority": t["priority"], "sla_due": t["sla_due"]},
    }


def routes(agent: Flow[Any, Any]) -> Routes:
    """``ticket.created`` starts an agent run that owns the ticket; a customer's reply is
    the ``customer_replied`` signal to that run."""
    return Routes({
        CREATED: StartFlow(agent, input_from=ticket_goal),
        REPLIED: Signal(CUSTOMER_REPLIED),
    })


@dataclass(frozen=True)
class Delivery:
    """One desk event and what intake did with it."""

    seq: int
    type: str
    ticket_id: str
    result: IntakeResult


def desk_events(desk: str, after: int) -> list[dict[str, Any]]:
    """The desk's feed after event number ``after``."""
    with urllib.request.urlopen(f"{desk}/events?after={after}", timeout=10) as resp:
        events: list[dict[str, Any]] = json.loads(resp.read())["events"]
    return events


def forward(client: Client, desk: str, table: Routes, *, after: int = 0) -> list[Delivery]:
    """Hand every desk event after ``after`` to intake, in order."""
    done = []
    for e in desk_events(desk, after):
        event = IntakeEvent(
            tenant_id=TENANT, entity_id=e["ticket"]["id"], event_type=e["type"],
            occurred_at=datetime.fromtimestamp(e["at"], UTC), source="desk",
            idempotency_key=f"desk-event-{e['seq']}", payload=e,
        )
        done.append(Delivery(e["seq"], e["type"], e["ticket"]["id"],
                             intake(client, event, table)))
    return done
