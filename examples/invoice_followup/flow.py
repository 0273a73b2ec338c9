"""The invoice follow-up agent: remind each overdue customer, wait, check, record.

Steps::

    fetch_overdue -> send_reminder -> (sleep) -> check_payment -> send_reminder -> ... -> done

``send_reminder`` is the dangerous one: e-mail cannot be unsent and the gateway is not
idempotent. Its intent is journaled before it runs, and if the process dies between the
gateway accepting a message and the journal recording it, the ``reconcile`` hook asks the
gateway's outbox whether a message with this call's idempotency key went out, instead of
sending it again.
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel

from underway import CallInfo, Flow, Reconciled, RetryPolicy, RunContext, Tool, tool
from underway.flow import Next

from .systems import Erp, Outbox

# -- typed input, state and tool payloads -----------------------------------------------


class FollowUpInput(BaseModel):
    """What a run is asked to do."""

    as_of: date
    wait_days: float = 3.0
    """How long to give a customer to pay after a reminder."""
    seconds_per_day: float = 86_400.0
    """Length of a day on the durable timer; the demo shrinks it to a fraction of a second."""


class Invoice(BaseModel):
    """An open invoice as the ERP reports it."""

    id: str
    customer: str
    email: str
    amount: Decimal
    currency: str
    due: date


class Outcome(BaseModel):
    """What came of one reminder."""

    invoice_id: str
    message_id: str
    paid_on: date | None


class FollowUpState(BaseModel):
    """The run's state: the worklist, where we are in it, and what happened so far."""

    invoices: list[Invoice] = []
    position: int = 0
    message_id: str | None = None
    outcomes: list[Outcome] = []


class OverdueQuery(BaseModel):
    """Arguments of ``fetch_overdue_invoices``."""

    as_of: date


class OverdueInvoices(BaseModel):
    """Result of ``fetch_overdue_invoices``."""

    invoices: list[Invoice]


class Reminder(BaseModel):
    """Arguments of ``send_reminder``: one e-mail."""

    invoice_id: str
    to: str
    subject: str
    body: str


class Receipt(BaseModel):
    """The e-mail gateway's receipt for a message it accepted."""

    message_id: str
    key: str
    to: str


class PaymentQuery(BaseModel):
    """Arguments of ``check_payment``."""

    invoice_id: str
    on: date


class PaymentStatus(BaseModel):
    """Result of ``check_payment``: when the payment arrived, if it did."""

    invoice_id: str
    paid_on: date | None


class OutcomeEntry(BaseModel):
    """A line of the ERP's collections log."""

    invoice_id: str
    message_id: str
    paid_on: date | None
    action: str


# -- tools over the simulated systems ---------------------------------------------------

RETRY = RetryPolicy(max_attempts=3, initial_interval=0.2, max_interval=2.0)
"""Reads, and writes that are idempotent, are retried on a durable timer (with the same
idempotency key): a slow or failing ERP costs a wait, not the run."""


def make_tools(data: Path) -> list[Tool]:
    """The agent's tools, bound to the ERP and outbox kept under ``data``."""
    erp, outbox = Erp(data), Outbox(data)

    @tool(mutating=False, retry=RETRY)
    def fetch_overdue_invoices(query: OverdueQuery) -> OverdueInvoices:
        return OverdueInvoices.model_validate({"invoices": erp.overdue(query.as_of)})

    async def reminder_sent(key: str) -> Reconciled:
        receipt = outbox.find(key)
        return Reconciled.happened(receipt) if receipt else Reconciled.not_happened()

    @tool(mutating=True, idempotent=False, timeout=10, reconcile=reminder_sent)
    def send_reminder(reminder: Reminder, call: CallInfo) -> Receipt:
        return Receipt.model_validate(
            outbox.send(call.key, reminder.to, reminder.subject, reminder.body)
        )

    @tool(mutating=False, retry=RETRY)
    def check_payment(query: PaymentQuery) -> PaymentStatus:
        return PaymentStatus(invoice_id=query.invoice_id, paid_on=erp.paid(query.invoice_id,
                                                                             query.on))

    @tool(mutating=True, idempotent=True, retry=RETRY)
    def record_outcome(entry: OutcomeEntry, call: CallInfo) -> OutcomeEntry:
        return OutcomeEntry.model_validate(erp.record(call.key, entry.model_dump(mode="json")))

    return [
        fetch_overdue_invoices,
        send_reminder,
        check_payment,
        record_outcome,
    ]


# -- the flow ---------------------------------------------------------------------------

followup: Flow[FollowUpState, FollowUpInput] = Flow(
    "invoice_followup", state=FollowUpState, input=FollowUpInput
)
Ctx = RunContext[FollowUpState, FollowUpInput]


def _reminder(inv: Invoice, as_of: date) -> Reminder:
    days = (as_of - inv.due).days
    return Reminder(
        invoice_id=inv.id,
        to=inv.email,
        subject=f"Reminder: invoice {inv.id} is {days} days overdue",
        body=(
            f"Dear {inv.customer},\n\nour invoice {inv.id} over {inv.amount} {inv.currency} "
            f"was due on {inv.due.isoformat()}. If you have already paid, please ignore this "
            "message; otherwise we would be grateful for payment within the next few days."
        ),
    )


@followup.step(start=True)
async def fetch_overdue(ctx: Ctx) -> Next:
    """Ask the ERP which invoices are overdue today."""
    found = await ctx.call("fetch_overdue_invoices", OverdueQuery(as_of=ctx.input.as_of))
    ctx.state.invoices = OverdueInvoices.model_validate(found).invoices
    if not ctx.state.invoices:
        return ctx.done({"reminded": 0, "paid": [], "unpaid": []})
    return ctx.goto(send_reminder)


@followup.step
async def send_reminder(ctx: Ctx) -> Next:
    """Remind the customer of the current invoice, then give them time to pay."""
    inv = ctx.state.invoices[ctx.state.position]
    receipt = await ctx.call("send_reminder", _reminder(inv, ctx.input.as_of))
    ctx.state.message_id = Receipt.model_validate(receipt).message_id
    wait = ctx.input.wait_days * ctx.input.seconds_per_day
    return ctx.sleep(wait, then=check_payment)


@followup.step
async def check_payment(ctx: Ctx) -> Next:
    """See whether the payment arrived, log the outcome, move on to the next invoice."""
    inv = ctx.state.invoices[ctx.state.position]
    checked_on = ctx.input.as_of + timedelta(days=ctx.input.wait_days)
    status = PaymentStatus.model_validate(
        await ctx.call("check_payment", PaymentQuery(invoice_id=inv.id, on=checked_on))
    )
    outcome = Outcome(
        invoice_id=inv.id, message_id=str(ctx.state.message_id), paid_on=status.paid_on
    )
    await ctx.call("record_outcome", OutcomeEntry(
        **outcome.model_dump(), action="close" if status.paid_on else "escalate to collections"
    ))
    ctx.state.outcomes.append(outcome)
    ctx.state.position += 1
    ctx.state.message_id = None
    if ctx.state.position < len(ctx.state.invoices):
        return ctx.goto(send_reminder)
    return ctx.done({
        "reminded": len(ctx.state.outcomes),
        "paid": [o.invoice_id for o in ctx.state.outcomes if o.paid_on],
        "unpaid": [o.invoice_id for o in ctx.state.outcomes if not o.paid_on],
    })
