"""The collections agent's tools: typed arguments and results over the simulated services.

Every tool reaches its service with :func:`underway.http.request`, which sends the call's
idempotency key; what each declares tells the guard what it does:

- ``lookup_invoice``, ``check_payment_status``: read-only;
- ``send_reminder``: mutating, ``idempotent`` (the gateway delivers once per key) and a
  ``message`` (budgets and policies count it); in the customer's ``language``
  (:mod:`.languages`);
- ``route_dispute``: mutating, ``idempotent`` (the ERP opens one ticket per key);
- ``issue_refund``, ``write_off``: ``irreversible``, their ``amount`` in INR, with a
  ``reconcile`` hook asking finance whether a key moved money.

``send_reminder`` renders one of a few polite templates and refuses a note with coercive
wording (:data:`COERCIVE_PHRASES`) before anything is sent; the policy holds a second,
independent rule against threats (``policy.toml``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from underway import CallInfo, Reconciled, RetryPolicy, Tool, tool
from underway.errors import ConfigurationError, UnderwayError
from underway.http import HTTPError, request

from . import languages
from .languages import Language, Template
from .services import SERVICES_FILE

COERCIVE_PHRASES = (
    "legal action", "court", "police", "arrest", "lawyer", "final warning", "or else",
    "consequences", "blacklist", "credit bureau", "shame", "we know where",
)
"""Wording a reminder must never carry: collections messages stay polite and factual."""



class CoerciveLanguage(UnderwayError):
    """A reminder's note contains coercive wording; nothing was sent."""

    retryable = False  # the same words would be refused again: the agent must rewrite them


# -- arguments and results --------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InvoiceRef(_Args):
    """Which invoice."""

    invoice_id: str = Field(pattern=r"^INV-\d+$", description="the invoice id, e.g. INV-2041")


class Dispute(BaseModel):
    """Part of an invoice the customer contests."""

    amount: Decimal
    reason: str
    reference: str


class Invoice(BaseModel):
    """An invoice as the ERP shows it; ``balance`` is the amount less write-offs."""

    id: str
    customer: str
    contact: str
    amount: Decimal
    currency: str
    issued: date
    due: date
    written_off: Decimal
    balance: Decimal
    status: Literal["open", "paid"]
    dispute: Dispute | None


class PaymentStatus(BaseModel):
    """Whether the customer has paid, and how much."""

    invoice_id: str
    paid: bool
    amount_paid: Decimal


class Reminder(_Args):
    """A reminder to send: the invoice, which template, and an optional personal note."""

    invoice_id: str = Field(pattern=r"^INV-\d+$")
    template: Template = Field(
        description="first_reminder, second_reminder, final_reminder (the third), or "
        "balance_corrected (after part of the invoice was written off)"
    )
    note: str = Field(default="", max_length=500,
                      description="an optional short, polite personal line")
    language: Language = Field(
        default="en", description="the customer's language: en, hi (Hindi), ta (Tamil), bn "
        "(Bengali) or mr (Marathi); the template is sent in it")


class Receipt(BaseModel):
    """The gateway's receipt; ``deduplicated`` when the key was delivered before."""

    message_id: str
    to: str
    invoice_id: str
    deduplicated: bool


class DisputeRoute(_Args):
    """Hand an invoice to a human team."""

    invoice_id: str = Field(pattern=r"^INV-\d+$")
    team: Literal["disputes", "collections"] = Field(
        description="disputes: the customer contests the amount; collections: no payment "
        "after the allowed reminders"
    )
    summary: str = Field(min_length=10, max_length=1000)


class Ticket(BaseModel):
    """The ERP ticket that now holds the invoice."""

    ticket_id: str
    invoice_id: str
    team: str
    deduplicated: bool


class MoneyMove(_Args):
    """A refund or write-off in INR."""

    invoice_id: str = Field(pattern=r"^INV-\d+$")
    amount: Decimal = Field(gt=0, max_digits=12, decimal_places=2, description="INR")
    reason: str = Field(min_length=5, max_length=1000)


class MoneyRecord(BaseModel):
    """Finance's record of a refund or write-off."""

    record_id: str
    kind: Literal["refund", "write_off"]
    invoice_id: str
    amount: Decimal
    currency: str
    deduplicated: bool


# -- service addresses --------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceUrls:
    """Where the simulated services listen."""

    erp: str
    payments: str
    gateway: str
    finance: str

    @classmethod
    def load(cls, data: Path) -> ServiceUrls:
        """The URLs the running services wrote to ``<data>/services.json``."""
        path = data / SERVICES_FILE
        try:
            urls = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{name: str(urls[name]) for name in ("erp", "payments", "gateway",
                                                             "finance")})
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigurationError(
                f"cannot read the simulated services' URLs from {path} ({exc}); start them "
                "first (examples.collections_agent.services.serve)"
            ) from None


# -- the tools ----------------------------------------------------------------------------


def polite_note(note: str) -> None:
    """Refuse a note with coercive wording (raises :class:`CoerciveLanguage`)."""
    lowered = note.lower()
    for phrase in COERCIVE_PHRASES:
        if phrase in lowered:
            raise CoerciveLanguage(
                f"the note contains the coercive phrase {phrase!r}; reminders must stay "
                "polite and factual: drop the note or rewrite it without pressure or threats"
            )


def render(inv: Invoice, template: Template, note: str,
           language: Language = "en") -> tuple[str, str]:
    """Subject and body of a reminder, from the templates of ``language``
    (:mod:`.languages`)."""
    return languages.render(language, template, customer=inv.customer, invoice=inv.id,
                            amount=inv.balance, due=inv.due, written_off=inv.written_off,
                            note=note)


RETRY = RetryPolicy(max_attempts=3, initial_interval=0.2, max_interval=2.0)
"""Reads, and the writes the services deduplicate by idempotency key, are retried with the
same key on a durable timer: a slow or garbled answer costs a wait, never a second effect."""


def make_tools(urls: ServiceUrls) -> list[Tool]:
    """The agent's tools, bound to the services at ``urls``. Every answer is read with
    ``Response.expect``: one that does not fit (cut short, a field missing, an error sent
    as 200) is a loud error, and after a POST an unknown outcome, settled by the key."""

    async def fetch_invoice(invoice_id: str, info: CallInfo) -> Invoice:
        got = await request("GET", f"{urls.erp}/invoices/{invoice_id}", info=info)
        return got.expect(Invoice)

    @tool(read_only=True, timeout=10, retry=RETRY)
    async def lookup_invoice(args: InvoiceRef, info: CallInfo) -> Invoice:
        """Read an invoice from the ERP: amount, balance after write-offs, due date,
        status, and any dispute the customer raised."""
        return await fetch_invoice(args.invoice_id, info)

    @tool(read_only=True, timeout=10, retry=RETRY)
    async def check_payment_status(args: InvoiceRef, info: CallInfo) -> PaymentStatus:
        """Ask the payments system whether the invoice is paid, and how much was paid."""
        got = await request("GET", f"{urls.payments}/payments/{args.invoice_id}", info=info)
        return got.expect(PaymentStatus)

    @tool(idempotent=True, message=True, timeout=10, retry=RETRY)
    async def send_reminder(args: Reminder, info: CallInfo) -> Receipt:
        """Send the customer a polite, templated payment reminder by e-mail."""
        polite_note(args.note)
        inv = await fetch_invoice(args.invoice_id, info)
        subject, body = render(inv, args.template, args.note, args.language)
        sent = await request("POST", f"{urls.gateway}/messages", info=info, json_body={
            "to": inv.contact, "invoice_id": inv.id, "subject": subject, "body": body,
        })
        return sent.expect(Receipt)

    @tool(idempotent=True, timeout=10, retry=RETRY)
    async def route_dispute(args: DisputeRoute, info: CallInfo) -> Ticket:
        """Hand the invoice to a human team with a summary: 'disputes' when the customer
        contests the amount, 'collections' when reminders are exhausted."""
        got = await request("POST", f"{urls.erp}/tickets", info=info,
                            json_body=args.model_dump(mode="json"))
        return got.expect(Ticket)

    async def money_moved(key: str) -> Reconciled:
        # Asked after a crash hid the outcome of a refund or write-off with this key; a
        # reconcile hook knows only the key, which is all the lookup sends.
        try:
            got = await request("GET", f"{urls.finance}/records/{key}",
                                info=CallInfo(key, tenant_id="", run_id="", step="reconcile",
                                              index=0))
        except HTTPError as exc:
            return Reconciled.not_happened() if exc.status == 404 else Reconciled.unknown()
        return Reconciled.happened(got.body)

    @tool(irreversible=True, amount="amount", currency="INR", reconcile=money_moved,
          timeout=10)
    async def issue_refund(args: MoneyMove, info: CallInfo) -> MoneyRecord:
        """Refund money the customer overpaid on an invoice (INR)."""
        got = await request("POST", f"{urls.finance}/refunds", info=info,
                            json_body=args.model_dump(mode="json"))
        return got.expect(MoneyRecord)

    @tool(irreversible=True, amount="amount", currency="INR", reconcile=money_moved,
          timeout=10)
    async def write_off(args: MoneyMove, info: CallInfo) -> MoneyRecord:
        """Write off part of an invoice the customer rightly disputes (INR); the balance
        drops by the amount."""
        got = await request("POST", f"{urls.finance}/write-offs", info=info,
                            json_body=args.model_dump(mode="json"))
        return got.expect(MoneyRecord)

    return [lookup_invoice, check_payment_status, send_reminder, route_dispute, issue_refund,
            write_off]
