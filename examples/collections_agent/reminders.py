"""Reminders in the customer's language, on a channel the customer consented to.

Steps::

    prepare -> send -> done
       └────> ask_person (no templates in the customer's language) -> send | done

``prepare`` reads the customer's profile (the language on file, the channels they prefer)
and the invoice — both read-only — and where the customer's consent stands for reminders
on each channel (the consent store: purposes ``reminders.whatsapp``, ``reminders.sms``,
``reminders.email``). It picks the first preferred channel the customer consents to. A
language with templates (:mod:`.languages`) goes straight to ``send``; any other — or
none on file — goes to a person with the ``collections`` role (``ctx.ask``), who answers
with a language to send in or says they will contact the customer themselves.

``send`` sends the template in that language. The policy (``reminders_policy.toml``)
requires the customer's consent for the channel at the moment of the call, so a consent
withdrawn after ``prepare`` stops the message, journaled with its rule. The run's result
records the language (and whether the profile or a person chose it), the channel and the
consent it relied on.

Runs are started with the customer as their data subject and ``collections`` as their
purpose: ``engine.start(localized_reminder, {...}, subject="C-101", purpose="collections")``.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from underway import CallInfo, Client, Flow, RunContext, Tool, tool
from underway.errors import ToolCallError
from underway.flow import Next
from underway.guard.policy import load_policy

from .languages import LANGUAGES, Language, Template, language_of, render

Channel = Literal["whatsapp", "sms", "email"]
CHANNELS: tuple[Channel, ...] = ("whatsapp", "sms", "email")
COLLECTIONS = "collections"
"""The role of the people who take over when there are no templates in a language."""
DIRECTORY = Path(__file__).with_name("customers.json")
POLICY = Path(__file__).with_name("reminders_policy.toml")


def consent_purpose(channel: str) -> str:
    """The consent purpose of reminders on ``channel``."""
    return f"reminders.{channel}"


# -- tool payloads and state ----------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReminderRequest(_Args):
    """Remind a customer of an invoice."""

    customer_id: str = Field(pattern=r"^C-\d+$")
    invoice_id: str = Field(pattern=r"^INV-\d+$")
    template: Template = "first_reminder"


class CustomerRef(_Args):
    """Which customer."""

    customer_id: str


class InvoiceRef(_Args):
    """Which invoice."""

    invoice_id: str


class Profile(BaseModel):
    """A customer as the CRM knows them."""

    id: str
    name: str
    language: str | None
    """The language tag on file (``hi-IN``, ``ta``...), if any."""
    channels: list[Channel]
    """Channels in the customer's order of preference."""
    contacts: dict[Channel, str]


class Due(BaseModel):
    """An open invoice."""

    id: str
    customer_id: str
    amount: Decimal
    due: date


class Consent(BaseModel):
    """Where a customer's consent to reminders on one channel stands."""

    channel: Channel
    purpose: str
    state: Literal["granted", "withdrawn", "never"]
    reference: str | None = None
    at: float | None = None
    by: str | None = None


class Consents(BaseModel):
    """A customer's consent to reminders, channel by channel."""

    channels: list[Consent]


class LocalizedReminder(_Args):
    """Arguments of ``send_localized_reminder``: which template, in which language, where."""

    customer_id: str
    invoice_id: str
    template: Template
    language: Language
    channel: Channel


class Sent(BaseModel):
    """The gateway's receipt."""

    message_id: str
    channel: Channel
    language: Language
    to: str
    deduplicated: bool


class ReminderState(BaseModel):
    """What the run knows and chose."""

    customer: str = ""
    language_on_file: str | None = None
    language: Language | None = None
    language_chosen_by: Literal["profile", "person"] | None = None
    channel: Channel | None = None
    consent: Consent | None = None
    consents: list[Consent] = []


# -- the outside world, on disk -------------------------------------------------------------


class Gateway:
    """A messaging gateway (WhatsApp, SMS, e-mail) that delivers once per idempotency key;
    its outbox in ``data/outbox.jsonl``."""

    def __init__(self, data: Path) -> None:
        self.path = data / "outbox.jsonl"
        self._lock = threading.Lock()

    def send(self, key: str, message: dict[str, Any]) -> dict[str, Any]:
        """Deliver ``message`` unless ``key`` was delivered before; the receipt."""
        with self._lock:
            for sent in self.messages():
                if sent["key"] == key:
                    return {**sent, "deduplicated": True}
            sent = {"key": key, "message_id": f"msg-{uuid.uuid4().hex[:10]}", **message}
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(sent, ensure_ascii=False, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            return {**sent, "deduplicated": False}

    def messages(self) -> list[dict[str, Any]]:
        """Every message delivered, in order."""
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


def make_reminder_tools(data: Path, client: Client,
                        directory: Path = DIRECTORY) -> list[Tool]:
    """The flow's tools: the CRM (``directory``), the consent store (through ``client``)
    and the gateway (its outbox under ``data``)."""
    book = json.loads(directory.read_text(encoding="utf-8"))
    customers = {c["id"]: c for c in book["customers"]}
    invoices = {i["id"]: i for i in book["invoices"]}
    gateway = Gateway(data)

    def customer(customer_id: str) -> Profile:
        if customer_id not in customers:
            raise LookupError(f"no customer {customer_id}")
        return Profile.model_validate(customers[customer_id])

    def invoice(invoice_id: str) -> Due:
        if invoice_id not in invoices:
            raise LookupError(f"no invoice {invoice_id}")
        return Due.model_validate(invoices[invoice_id])

    @tool(read_only=True, timeout=10)
    def customer_profile(args: CustomerRef) -> Profile:
        """The customer's name, language on file, preferred channels and contacts."""
        return customer(args.customer_id)

    @tool(read_only=True, timeout=10)
    def invoice_due(args: InvoiceRef) -> Due:
        """An open invoice: amount and due date."""
        return invoice(args.invoice_id)

    @tool(read_only=True, timeout=10)
    def channel_consents(args: CustomerRef, info: CallInfo) -> Consents:
        """Where the customer's consent to reminders stands on each channel."""
        found = client.consents(args.customer_id, tenant_id=info.tenant_id)
        out = []
        for channel in CHANNELS:
            record = found.get(consent_purpose(channel))
            out.append(Consent(channel=channel, purpose=consent_purpose(channel),
                               state="never") if record is None else Consent(
                channel=channel, purpose=record.purpose, state=record.state,
                reference=record.reference, at=record.at, by=record.by))
        return Consents(channels=out)

    @tool(idempotent=True, message=True, timeout=10, input_labels=("personal",))
    def send_localized_reminder(args: LocalizedReminder, info: CallInfo) -> Sent:
        """Send the customer a reminder template in their language on a channel."""
        who, inv = customer(args.customer_id), invoice(args.invoice_id)
        if inv.customer_id != who.id:
            raise LookupError(f"invoice {inv.id} is not {who.id}'s")
        to = who.contacts.get(args.channel)
        if to is None:
            raise LookupError(f"{who.id} has no {args.channel} contact")
        subject, body = render(args.language, args.template, customer=who.name,
                               invoice=inv.id, amount=inv.amount, due=inv.due)
        receipt = gateway.send(info.key, {
            "customer_id": who.id, "invoice_id": inv.id, "channel": args.channel,
            "language": args.language, "to": to, "subject": subject, "body": body})
        return Sent.model_validate(receipt)

    return [customer_profile, invoice_due, channel_consents, send_localized_reminder]


# -- the flow -------------------------------------------------------------------------------

localized_reminder: Flow[ReminderState, ReminderRequest] = Flow(
    "localized_reminder", state=ReminderState, input=ReminderRequest,
    tools=["customer_profile", "invoice_due", "channel_consents", "send_localized_reminder"],
    policy=load_policy(POLICY),
)
Ctx = RunContext[ReminderState, ReminderRequest]


@localized_reminder.step(start=True)
async def prepare(ctx: Ctx) -> Next:
    """The customer's language and channels, the invoice, and the consents."""
    who = Profile.model_validate(
        await ctx.call("customer_profile", CustomerRef(customer_id=ctx.input.customer_id)))
    Due.model_validate(await ctx.call("invoice_due",
                                      InvoiceRef(invoice_id=ctx.input.invoice_id)))
    seen = Consents.model_validate(
        await ctx.call("channel_consents", CustomerRef(customer_id=who.id)))
    s = ctx.state
    s.customer, s.language_on_file, s.consents = who.name, who.language, seen.channels
    granted = {c.channel: c for c in seen.channels if c.state == "granted"}
    s.channel = next((ch for ch in who.channels if ch in granted and ch in who.contacts), None)
    if s.channel is None:
        return ctx.done(result(s, "not_sent", "the customer consents to reminders on none "
                                              "of their channels"))
    s.consent = granted[s.channel]
    s.language = language_of(who.language)
    if s.language is None:
        return ctx.goto(ask_person)
    s.language_chosen_by = "profile"
    return ctx.goto(send)


@localized_reminder.step
async def ask_person(ctx: Ctx) -> Next:
    """No templates in the customer's language: a person decides."""
    s = ctx.state
    on_file = f"language {s.language_on_file!r}" if s.language_on_file else "no language"
    answer = await ctx.ask(
        f"{s.customer} ({ctx.input.customer_id}) has {on_file} on file, and there are no "
        f"reminder templates in it. Answer {{\"language\": \"<code>\"}} to send the "
        f"{ctx.input.template.replace('_', ' ')} for {ctx.input.invoice_id} by {s.channel} in "
        f"one of {', '.join(LANGUAGES)}, or {{\"handled\": true, \"note\": \"...\"}} if you "
        "will contact the customer yourself.",
        context={"customer_id": ctx.input.customer_id, "customer": s.customer,
                 "language_on_file": s.language_on_file, "languages": LANGUAGES,
                 "invoice_id": ctx.input.invoice_id, "channel": s.channel},
        role=COLLECTIONS,
    )
    reply = answer if isinstance(answer, dict) else {}
    if reply.get("handled") is True:
        return ctx.done(result(s, "handled_by_person", str(reply.get("note", ""))))
    chosen = language_of(reply.get("language"))
    if chosen is None:
        return ctx.goto(ask_person)  # not an answer to act on: ask again
    s.language, s.language_chosen_by = chosen, "person"
    return ctx.goto(send)


@localized_reminder.step
async def send(ctx: Ctx) -> Next:
    """Send the template in the chosen language; the policy checks the consent now."""
    s = ctx.state
    assert s.language is not None and s.channel is not None
    try:
        sent = Sent.model_validate(await ctx.call("send_localized_reminder", LocalizedReminder(
            customer_id=ctx.input.customer_id, invoice_id=ctx.input.invoice_id,
            template=ctx.input.template, language=s.language, channel=s.channel)))
    except ToolCallError as exc:
        if exc.error_type != "PolicyDenied":
            raise
        return ctx.done(result(s, "not_sent", exc.message))
    return ctx.done(result(s, "sent", "", message_id=sent.message_id))


def result(s: ReminderState, outcome: str, why: str, **more: Any) -> dict[str, Any]:
    """The run's result: what happened, in which language, on which consent."""
    return {
        "outcome": outcome, "why": why, "language": s.language,
        "language_on_file": s.language_on_file, "language_chosen_by": s.language_chosen_by,
        "channel": s.channel,
        "consent": s.consent.model_dump(mode="json") if s.consent else None, **more,
    }
