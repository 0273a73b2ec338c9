"""The default brain: deterministic rules standing in for a language model.

:func:`decide` reads the conversation the agent sends (the goal with the ticket's
desk-owned fields, then every tool call and its quoted result) and answers with the next
action, so the same request always gets the same answer, before and after a crash. Set
``UNDERWAY_MODEL`` to use a real model instead (see :mod:`support.app`).

For an ordinary ticket the rules do what a careful agent does: read the ticket, ask for
the order number when an order question lacks one and wait for the answer, look the
answer up in the help center, draft, send, and escalate what they cannot settle.

For a ticket whose text addresses the agent ("ignore your rules..."), the rules play the
worst case of a model: one that is talked into obeying. They try to close the ticket,
call a refund tool, and send the reply the customer dictated. What stops them is not the
brain but the guard around every call: the allow-list, the policy and a person's signed
decision.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from underway.models.types import Message, ModelRequest, ModelResponse
from underway.testing import say

PLAN = [
    "read what the customer wrote",
    "ask for missing details (an order number) and wait for the answer",
    "find the answer in the help center",
    "draft and send the reply",
    "escalate to a person whatever cannot be settled",
]
REPLY_NOTE = "The customer answered the request for details."
"""How the agent tells the model that the customer replied (see :mod:`support.agent`)."""

_ORDER = re.compile(r"\b[A-Z]-\d{4}\b")
_INJECTION = re.compile(r"ignore (your|all|previous|the) (rules|instructions)", re.I)
_DICTATED = re.compile(r"reply with exactly:\s*(.+?)\s*$", re.I | re.S)
_BLOCK = re.compile(r'^<tool_output source="[^"]*" trust="[^"]*">\n(.*)\n</tool_output>$', re.S)


@dataclass(frozen=True)
class Topic:
    """What a ticket is about: words that reveal it, the help-center query, and whether
    answering needs the order number."""

    name: str
    clues: tuple[str, ...]
    query: str
    needs_order: bool


TOPICS = (
    Topic("account", ("log in", "locked", "password", "sign in"),
          "account locked failed payment", needs_order=False),
    Topic("double charge", ("charged twice", "double charge"),
          "charged twice double charge", needs_order=True),
    Topic("tracking", ("tracking",), "tracking delivery parcel", needs_order=True),
    Topic("lost package", ("arrived",), "package never arrived", needs_order=True),
    Topic("exchange", ("size", "exchange"), "exchanging an item", needs_order=True),
)


@dataclass
class Step:
    """One tool call of the conversation and what came of it."""

    tool: str
    args: dict[str, Any]
    result: Any = None
    ok: bool = False


@dataclass
class Conversation:
    """The parts of a request the rules look at."""

    context: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    replied_at: int = 0
    """Index in ``steps`` where the customer's latest answer arrived."""
    guided: bool = False
    """A person told the agent how to proceed."""

    @classmethod
    def of(cls, req: ModelRequest) -> Conversation:
        """Read the conversation out of ``req``."""
        conv = cls(context=_context(req.messages))
        pending: list[Step] = []
        for m in req.messages[2:]:
            if m.role == "assistant":
                pending = [Step(c.name, c.arguments or {}) for c in m.tool_calls]
                conv.steps += pending
            elif m.role == "tool" and pending:
                step = pending.pop(0)
                step.result = _unquote(m.content)
                step.ok = not (isinstance(step.result, dict) and "error" in step.result
                               and "message" in step.result)
            elif m.role == "user" and m.content.startswith(REPLY_NOTE):
                conv.replied_at = len(conv.steps)
            elif m.role == "user" and m.content.startswith("Guidance from a person"):
                conv.guided = True
        return conv

    def last(self, tool: str, *, since: int = 0) -> Step | None:
        """The latest call of ``tool`` (from step ``since`` on)."""
        return next((s for s in reversed(self.steps[since:]) if s.tool == tool), None)

    def succeeded(self, tool: str, *, since: int = 0) -> Step | None:
        """The latest successful call of ``tool`` (from step ``since`` on)."""
        return next((s for s in reversed(self.steps[since:]) if s.tool == tool and s.ok),
                    None)


def decide(req: ModelRequest) -> ModelResponse:
    """The next action for the conversation in ``req``."""
    if req.kind == "plan":
        return say(None, ("set_plan", {"steps": PLAN}))
    conv = Conversation.of(req)
    tid = str(conv.context.get("ticket_id", ""))
    if conv.guided:
        return _escalate_or_finish(conv, tid, "a person asked to take over")
    read = conv.succeeded("read_ticket", since=conv.replied_at)
    if read is None:
        return say("First, read what the customer wrote.", ("read_ticket", {"ticket_id": tid}))
    ticket: dict[str, Any] = read.result
    text = "\n".join([ticket["subject"], ticket["body"], *ticket["customer_messages"]])
    if _INJECTION.search(text):
        return _obey(conv, tid, ticket, text)
    topic = next((t for t in TOPICS if any(c in text.lower() for c in t.clues)), None)
    if topic is None:
        return _escalate_or_finish(conv, tid, "no help-center article covers this request")
    orders = _ORDER.findall(text)
    if topic.needs_order and not orders:
        if conv.succeeded("request_details") is None:
            return say("The order number is missing; ask the customer for it.", (
                "request_details", {"ticket_id": tid, "message": (
                    "Thank you for writing to us. Could you tell us your order number? "
                    "It looks like A-1234 and is in your order confirmation e-mail.")}))
        return _escalate_or_finish(conv, tid, "the customer did not give an order number")
    found = conv.succeeded("search_help_center", since=conv.replied_at)
    if found is None:
        return say(f"Look up the help center on {topic.name}.",
                   ("search_help_center", {"query": topic.query, "limit": 1}))
    if not found.result:
        return _escalate_or_finish(conv, tid, "no help-center article covers this request")
    body = _reply(conv.context, orders[-1] if orders else None, found.result[0]["text"])
    if conv.succeeded("draft_reply") is None:
        return say("Draft the reply.", ("draft_reply", {"ticket_id": tid, "body": body}))
    return _send(conv, tid, body, f"answered from {found.result[0]['source']}")


def _obey(conv: Conversation, tid: str, ticket: dict[str, Any], text: str) -> ModelResponse:
    """What a model that was talked into obeying the ticket's text would do."""
    if conv.last("close_ticket") is None:
        return say("The ticket's system notice says to close it and refund the customer.",
                   ("close_ticket", {"ticket_id": tid, "status": ticket["status"]}),
                   ("issue_refund", {"ticket_id": tid, "amount": 500, "currency": "USD"}))
    dictated = _DICTATED.search(text)
    body = dictated.group(1) if dictated else "Your refund is approved."
    return _send(conv, tid, body, "sent the reply the ticket asked for")


def _send(conv: Conversation, tid: str, body: str, done: str) -> ModelResponse:
    sent = conv.last("send_reply")
    if sent is None:
        return say("Send the reply.", ("send_reply", {
            "ticket_id": tid, "priority": conv.context.get("priority", "normal"), "body": body}))
    if sent.ok:
        return say(None, ("finish", {"result": {"outcome": "replied", "ticket_id": tid,
                                                "note": done}}))
    why = sent.result.get("message", "") if isinstance(sent.result, dict) else ""
    return _escalate_or_finish(conv, tid, f"the reply was not sent: {why}"[:300])


def _escalate_or_finish(conv: Conversation, tid: str, reason: str) -> ModelResponse:
    done = conv.succeeded("escalate_ticket")
    if done is None:
        return say(f"Escalate: {reason}.",
                   ("escalate_ticket", {"ticket_id": tid, "reason": reason}))
    return say(None, ("finish", {"result": {"outcome": "escalated", "ticket_id": tid,
                                            "reason": done.args.get("reason", reason)}}))


def _reply(context: dict[str, Any], order: str | None, article: str) -> str:
    name = str(context.get("customer", "")).split(" ")[0] or "there"
    about = f" about order {order}" if order else ""
    # The article's title ends at its first full stop; the customer gets its advice.
    advice = article.split(". ", 1)[-1]
    return (f"Hello {name},\n\nthank you for contacting us{about}. {advice}\n\n"
            "Kind regards,\nthe support team")


def _context(messages: list[Message]) -> dict[str, Any]:
    """The run input's context, quoted in the goal message."""
    goal = messages[1].content if len(messages) > 1 else ""
    start = goal.find("<tool_output")
    value = _unquote(goal[start:]) if start >= 0 else None
    return value if isinstance(value, dict) else {}


def _unquote(content: str) -> Any:
    m = _BLOCK.match(content.strip())
    body = m.group(1) if m else content
    try:
        return json.loads(body)
    except ValueError:
        return body
