"""The agent's typed tools over the ticket desk's HTTP API.

Every call goes through :func:`underway.http.request`, which sends the call's
``Idempotency-Key``: the same on every attempt of one call, so the desk performs each
change once however often a crashed worker's successor retries it. That is why the desk's
mutating tools are declared ``idempotent``.

What customers wrote is untrusted: ``read_ticket`` returns only the customer's own words
(subject, body, replies) plus the ticket's status, and is labelled ``untrusted``, so the
agent quotes it to the model as data, and once the model has read it every reply, draft,
escalation or close it proposes carries the ``untrusted`` label to the policy. Fields the
desk owns (id, priority, SLA) come from trusted places, declared ``trusted_output``: the
run's input and ``list_open_tickets``; so do the help-center articles staff wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from underway import CallInfo, Tool, tool
from underway.http import request
from underway.knowledge import KnowledgeBase, recall_tool
from underway.retry import RetryPolicy

Priority = Literal["low", "normal", "high"]
TicketId = str

_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.5, max_interval=5.0)
_TIMEOUT_S = 15.0


class DeskAnswer(BaseModel):
    """What the desk answers to a change: the ticket it changed, and what it did."""

    model_config = ConfigDict(extra="allow")

    ticket_id: TicketId


def _object(body: object, path: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError(f"the desk answered {path} with {type(body).__name__}, not an object")
    return body


class NoArgs(BaseModel):
    """A tool without arguments."""


class TicketRef(BaseModel):
    """Names one ticket."""

    ticket_id: TicketId = Field(pattern=r"^T-\d+$", description="the ticket id, e.g. T-101")


class DraftArgs(TicketRef):
    """A reply draft."""

    body: str = Field(min_length=1, max_length=4000)


class ReplyArgs(TicketRef):
    """A reply to send; ``priority`` must be the ticket's (the desk checks)."""

    priority: Priority
    body: str = Field(min_length=1, max_length=4000)


class DetailsArgs(TicketRef):
    """What to ask the customer for."""

    message: str = Field(min_length=1, max_length=2000)


class EscalateArgs(TicketRef):
    """Why a person must take over."""

    reason: str = Field(min_length=1, max_length=1000)


class CloseArgs(TicketRef):
    """``status`` is the ticket's status as last read; only ``resolved`` tickets close."""

    status: str


class TicketSummary(BaseModel):
    """A ticket as the desk lists it: only fields the desk owns."""

    id: TicketId
    customer: str
    priority: Priority
    created_at: float
    sla_due: float
    status: str
    first_response_at: float | None


class OpenTickets(BaseModel):
    """The desk's open tickets."""

    tickets: list[TicketSummary]


class CustomerText(BaseModel):
    """What the customer wrote on a ticket, and the ticket's status."""

    status: str
    subject: str
    body: str
    customer_messages: list[str]


@dataclass(frozen=True)
class DeskTools:
    """The tools, by name, bound to one desk and one knowledge base."""

    list_open_tickets: Tool
    read_ticket: Tool
    search_help_center: Tool
    request_details: Tool
    draft_reply: Tool
    send_reply: Tool
    escalate_ticket: Tool
    close_ticket: Tool

    @property
    def all(self) -> list[Tool]:
        """Every tool, in a stable order."""
        return [self.list_open_tickets, self.read_ticket, self.search_help_center,
                self.request_details, self.draft_reply, self.send_reply,
                self.escalate_ticket, self.close_ticket]


def make_tools(desk: str, knowledge: KnowledgeBase) -> DeskTools:
    """The tools, calling the desk at base URL ``desk``."""

    async def post(path: str, info: CallInfo, body: BaseModel) -> dict[str, Any]:
        payload = body.model_dump(mode="json", exclude={"ticket_id"})
        resp = await request("POST", f"{desk}{path}", info=info, json_body=payload,
                             timeout=_TIMEOUT_S)
        # An answer that is not the desk's (cut short, an error sent as 200) is an unknown
        # outcome, retried with the same key: the desk acts once per key.
        return resp.expect(DeskAnswer).model_dump(mode="json")

    @tool(read_only=True, timeout=_TIMEOUT_S, retry=_RETRY, trusted_output=True)
    async def list_open_tickets(args: NoArgs, info: CallInfo) -> OpenTickets:
        """List the desk's open tickets: id, customer, priority, SLA due time, status."""
        resp = await request("GET", f"{desk}/tickets", info=info, timeout=_TIMEOUT_S)
        return OpenTickets.model_validate(resp.body)

    @tool(read_only=True, timeout=_TIMEOUT_S, retry=_RETRY, output_labels=("untrusted",))
    async def read_ticket(args: TicketRef, info: CallInfo) -> CustomerText:
        """Read what the customer wrote on a ticket (subject, body, replies) and its status."""
        resp = await request("GET", f"{desk}/tickets/{args.ticket_id}", info=info,
                             timeout=_TIMEOUT_S)
        t = _object(resp.body, f"/tickets/{args.ticket_id}")
        return CustomerText(
            status=t["status"], subject=t["subject"], body=t["body"],
            customer_messages=[m["body"] for m in t["messages"] if m["from"] == "customer"],
        )

    @tool(idempotent=True, message=True, timeout=_TIMEOUT_S, retry=_RETRY)
    async def request_details(args: DetailsArgs, info: CallInfo) -> dict[str, Any]:
        """Ask the customer for missing details (an order number, say); then wait for them."""
        return await post(f"/tickets/{args.ticket_id}/details-requests", info, args)

    @tool(idempotent=True, timeout=_TIMEOUT_S, retry=_RETRY)
    async def draft_reply(args: DraftArgs, info: CallInfo) -> dict[str, Any]:
        """Save a reply draft on the ticket (the customer does not see it)."""
        return await post(f"/tickets/{args.ticket_id}/drafts", info, args)

    @tool(idempotent=True, message=True, timeout=_TIMEOUT_S, retry=_RETRY)
    async def send_reply(args: ReplyArgs, info: CallInfo) -> dict[str, Any]:
        """Send a reply to the customer. Give the ticket's priority exactly."""
        return await post(f"/tickets/{args.ticket_id}/replies", info, args)

    @tool(idempotent=True, timeout=_TIMEOUT_S, retry=_RETRY)
    async def escalate_ticket(args: EscalateArgs, info: CallInfo) -> dict[str, Any]:
        """Hand the ticket to a person in the tier-2 queue, saying why."""
        return await post(f"/tickets/{args.ticket_id}/escalations", info, args)

    @tool(idempotent=True, timeout=_TIMEOUT_S, retry=_RETRY)
    async def close_ticket(args: CloseArgs, info: CallInfo) -> dict[str, Any]:
        """Close a ticket the customer confirmed resolved; give its current status."""
        return await post(f"/tickets/{args.ticket_id}/close", info, args)

    search = recall_tool(knowledge, name="search_help_center", max_sensitivity="public",
                         timeout=_TIMEOUT_S, trusted_output=True)
    return DeskTools(list_open_tickets, read_ticket, search, request_details, draft_reply,
                     send_reply, escalate_ticket, close_ticket)
