"""Overdue-invoice events from the ERP's nightly ageing job, and how intake routes them.

Each event starts one agent run for its invoice: the event's idempotency key makes a
redelivered event (webhooks are delivered at least once) a ``duplicate`` that starts
nothing, and the invoice is the event's entity, so a run owns its invoice while it works.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from underway import Client
from underway.agent import AgentInput
from underway.scheduling.intake import IntakeEvent, IntakeResult, Routes, StartFlow, intake

from .agent import NAME
from .services import Systems

EVENT_TYPE = "invoice.overdue"


def agent_input(event: IntakeEvent) -> AgentInput:
    """The run's goal and context for an overdue invoice."""
    inv: dict[str, Any] = dict(event.payload) if isinstance(event.payload, dict) else {}
    return AgentInput(
        goal=(f"Collect overdue invoice {inv.get('invoice_id')} ({inv.get('amount')} INR from "
              f"{inv.get('customer')}, due {inv.get('due')}), politely and within policy."),
        context=inv,
    )


ROUTES = Routes({EVENT_TYPE: StartFlow(NAME, input_from=agent_input)})


def overdue_event(invoice: dict[str, Any]) -> IntakeEvent:
    """The ERP's event for an overdue invoice (its key: invoice and due date)."""
    return IntakeEvent(
        tenant_id="default", entity_id=invoice["id"], event_type=EVENT_TYPE,
        occurred_at=datetime.now(UTC), source="erp.ageing-job",
        idempotency_key=f"overdue:{invoice['id']}:{invoice['due']}",
        payload={"invoice_id": invoice["id"], "customer": invoice["customer"],
                 "amount": invoice["amount"], "currency": invoice["currency"],
                 "due": invoice["due"]},
    )


def deliveries(systems: Systems) -> list[IntakeEvent]:
    """Tonight's deliveries: one event per open invoice, and the second one delivered twice."""
    events = [overdue_event(systems.invoice(i)) for i in systems.invoice_ids()]
    return [*events[:2], events[1], *events[2:]]


def deliver(client: Client, events: list[IntakeEvent]) -> list[IntakeResult]:
    """Hand each event to intake; a redelivery comes back as a ``duplicate``."""
    return [intake(client, event, ROUTES) for event in events]
