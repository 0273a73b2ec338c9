"""The demo's default model: a rule-based collections agent that reads the conversation.

:class:`CollectionsBrain` answers each request from the conversation alone (no memory of
earlier calls), so a worker killed mid-run and its replacement get the same answers, and
every answer is journaled like a real model's. It plays a sensible collections agent:

1. plan; then, each round: look up the invoice, check the payment;
2. paid: refund any overpayment, finish;
3. disputed: recall the playbook, route the dispute to the disputes team, propose a
   write-off of the disputed part (the policy holds it for finance above 5,000 INR), tell
   the customer the corrected balance;
4. otherwise: a polite reminder, then wait three days (durably) and start the next round.
   Its third reminder is drafted first with a threat, then with pressure — as a model
   might — so the demo shows the policy and then the tool refusing them; the third draft
   is the plain template;
5. after three reminders it tries a fourth, which the policy's counter rule refuses, and
   hands the invoice to the collections team.

A "day" lasts ``day_seconds`` (``UNDERWAY_DEMO_DAY_SECONDS``, 86,400 unless set; the demo
sets about 1), so a three-day wait takes three seconds in the demo.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from underway.errors import ConfigurationError
from underway.events import JSON
from underway.models.types import ModelRequest, ModelResponse
from underway.testing import say as _say

DAY_ENV = "UNDERWAY_DEMO_DAY_SECONDS"
MODEL_NAME = "collections-brain"
WAIT_DAYS = 3
MAX_REMINDERS = 3
PLAYBOOK_QUERY = "dispute damaged goods write-off"
TEMPLATES = ("first_reminder", "second_reminder", "final_reminder")
DRAFT_NOTES = (
    "Please settle within 7 days to avoid legal action.",
    "Consider this a final warning before we pause your deliveries.",
    "",
)
"""The third reminder's personal note, draft after draft: the first two are refused."""

_BLOCK = re.compile(r'<tool_output source="[^"]*" trust="[^"]*">\n(.*)\n</tool_output>', re.S)


DAY_FILE = "day_seconds"
"""The file of a data directory that records the length of its day (written by the demo):
a worker, a replay or a deploy check on the same data sees the same day."""


def day_seconds(environ: Mapping[str, str] | None = None, data: Path | None = None) -> float:
    """The length of a day in seconds: ``UNDERWAY_DEMO_DAY_SECONDS``, else what ``data``
    records (:func:`record_day`), else 86,400."""
    raw = (os.environ if environ is None else environ).get(DAY_ENV, "").strip()
    if not raw and data is not None and (data / DAY_FILE).is_file():
        raw = (data / DAY_FILE).read_text().strip()
    if not raw:
        return 86_400.0
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigurationError(f"{DAY_ENV}={raw!r} must be a positive number of seconds")
    return value


def record_day(data: Path, seconds: float) -> None:
    """Record in ``data`` that its day lasts ``seconds``. The agent's instructions name the
    day's length, so a replay on this data must ask the model with the same one."""
    (data / DAY_FILE).write_text(f"{seconds!r}\n")


@dataclass(frozen=True)
class Turn:
    """One tool call of the conversation and what came back."""

    name: str
    args: dict[str, Any]
    result: JSON

    @property
    def failed(self) -> bool:
        """True when the call was refused or failed."""
        return isinstance(self.result, dict) and "error" in self.result

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return not self.failed

    def field(self, name: str) -> Any:
        """A field of a successful result."""
        return self.result.get(name) if isinstance(self.result, dict) else None


def unquote(content: str) -> JSON:
    """The data inside a ``<tool_output>`` block (JSON when it parses, else text)."""
    found = _BLOCK.search(content)
    body = found.group(1) if found else content
    try:
        value: JSON = json.loads(body)
    except ValueError:
        return body
    return value


def turns(req: ModelRequest) -> list[Turn]:
    """The conversation's tool calls paired with their results, in order."""
    out: list[Turn] = []
    waiting: list[tuple[str, dict[str, Any]]] = []
    for m in req.messages:
        if m.role == "assistant":
            waiting = [(c.name, c.arguments or {}) for c in m.tool_calls]
        elif m.role == "tool" and waiting:
            name, args = waiting.pop(0)
            out.append(Turn(name, args, unquote(m.content)))
    return out


def run_context(req: ModelRequest) -> dict[str, Any]:
    """The run's input context (quoted in the goal message)."""
    for m in req.messages:
        if m.role == "user" and m.content.startswith("Goal:"):
            value = unquote(m.content.partition("\nContext:\n")[2])
            if isinstance(value, dict):
                return value
    raise ConfigurationError("the collections brain needs the run's context with an "
                             "invoice_id; start runs through the overdue-invoice intake")


def say(text: str, *calls: tuple[str, JSON]) -> ModelResponse:
    """The brain's answer: its reasoning and the calls it makes."""
    return _say(text, *calls, model=MODEL_NAME)


def _money(value: Any) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal("0")


class CollectionsBrain:
    """The decide function of a :class:`~underway.testing.RuleModel` (see the module doc)."""

    def __init__(self, day_seconds: float) -> None:
        self.wait_seconds = WAIT_DAYS * day_seconds

    def __call__(self, req: ModelRequest) -> ModelResponse:
        """The next answer for ``req``."""
        if req.kind == "plan":
            return say("Plan for this overdue invoice.", ("set_plan", {"steps": [
                "Look up the invoice and check whether it is paid",
                f"Send a polite reminder, then wait {WAIT_DAYS} days; at most "
                f"{MAX_REMINDERS} reminders",
                "If the customer disputes part of it: route the dispute and propose a "
                "write-off (finance approves above 5,000 INR)",
                "Refund any overpayment",
                "Finish when paid, or hand the invoice to the collections team",
            ]}))
        return self._act(req)

    def _act(self, req: ModelRequest) -> ModelResponse:
        inv_id = str(run_context(req)["invoice_id"])
        history = turns(req)
        waits = [i for i, t in enumerate(history) if t.name == "wait" and t.ok]
        round_ = history[waits[-1] + 1:] if waits else history
        lookup = _last(round_, "lookup_invoice", ok=True)
        if lookup is None:
            return say(f"Read invoice {inv_id} from the ERP.",
                       ("lookup_invoice", {"invoice_id": inv_id}))
        payment = _last(round_, "check_payment_status", ok=True)
        if payment is None:
            return say(f"Check whether {inv_id} has been paid.",
                       ("check_payment_status", {"invoice_id": inv_id}))
        sent = [t for t in history if t.name == "send_reminder" and t.ok]
        if payment.field("paid"):
            return self._paid(inv_id, history, lookup, payment, len(sent))
        dispute = lookup.field("dispute")
        if isinstance(dispute, dict):
            answer = self._dispute(req, inv_id, history, dispute)
            if answer is not None:
                return answer
        if any(t.name == "send_reminder" and t.ok for t in round_):
            return say(f"Give the customer {WAIT_DAYS} days to respond.", ("wait", {
                "seconds": self.wait_seconds, "reason": f"{WAIT_DAYS} days for the customer"}))
        reminders = sum(1 for t in sent if t.args.get("template") in TEMPLATES)
        if reminders < MAX_REMINDERS:
            return self._remind(inv_id, reminders, round_)
        return self._hand_over(inv_id, history, round_, reminders)

    def _paid(self, inv_id: str, history: list[Turn], lookup: Turn, payment: Turn,
              sent: int) -> ModelResponse:
        over = _money(payment.field("amount_paid")) - _money(lookup.field("balance"))
        refund = _last(history, "issue_refund")
        if over > 0 and refund is None:
            return say(
                f"The customer paid {over} INR more than the balance; refund it.",
                ("issue_refund", {"invoice_id": inv_id, "amount": str(over),
                                  "reason": f"overpayment of {over} INR on {inv_id}"}),
            )
        write_off = _last(history, "write_off", ok=True)
        return say(f"{inv_id} is paid.", ("finish", {"result": {
            "outcome": "paid", "invoice_id": inv_id, "reminders_sent": sent,
            "refunded": refund.field("amount") if refund is not None else None,
            "written_off": write_off.field("amount") if write_off is not None else None,
        }}))

    def _dispute(self, req: ModelRequest, inv_id: str, history: list[Turn],
                 dispute: dict[str, Any]) -> ModelResponse | None:
        amount, reason = dispute.get("amount"), dispute.get("reason")
        summary = (f"Customer disputes {amount} INR of {inv_id}: {reason} "
                   f"({dispute.get('reference')}).")
        if "recall" in {t.name for t in req.tools} and _last(history, "recall") is None:
            return say("Check the playbook on disputes.",
                       ("recall", {"query": PLAYBOOK_QUERY, "limit": 3}))
        if _last(history, "route_dispute", ok=True) is None:
            return say(summary + " Route it to the disputes team.", ("route_dispute", {
                "invoice_id": inv_id, "team": "disputes", "summary": summary}))
        write_off = _last(history, "write_off")
        if write_off is None:
            return say(
                summary + " The damage is documented, so the playbook says to write off the "
                "damaged units; finance approves write-offs above 5,000 INR.",
                ("write_off", {"invoice_id": inv_id, "amount": str(amount),
                               "reason": f"disputed: {reason} ({dispute.get('reference')})"}),
            )
        if write_off.failed:
            return say("The write-off was not approved; the disputes team has the case.",
                       ("finish", {"result": {"outcome": "dispute_open", "invoice_id": inv_id,
                                              "write_off": write_off.result}}))
        corrected = [t for t in history if t.name == "send_reminder" and t.ok
                     and t.args.get("template") == "balance_corrected"]
        if not corrected:
            return say("Tell the customer the corrected balance.", ("send_reminder", {
                "invoice_id": inv_id, "template": "balance_corrected"}))
        return None

    def _remind(self, inv_id: str, reminders: int, round_: list[Turn]) -> ModelResponse:
        template = TEMPLATES[reminders]
        args: dict[str, Any] = {"invoice_id": inv_id, "template": template}
        why = f"No payment yet: send the {template.replace('_', ' ')}."
        if template == "final_reminder":
            drafts = sum(1 for t in round_ if t.name == "send_reminder" and t.failed)
            note = DRAFT_NOTES[min(drafts, len(DRAFT_NOTES) - 1)]
            if note:
                args["note"] = note
            if drafts:
                why = "The last draft was refused; send it without pressure."
        return say(why, ("send_reminder", args))

    def _hand_over(self, inv_id: str, history: list[Turn], round_: list[Turn],
                   reminders: int) -> ModelResponse:
        if not any(t.name == "send_reminder" and t.failed for t in round_):
            return say("Still unpaid after three reminders; try one more.", ("send_reminder", {
                "invoice_id": inv_id, "template": "final_reminder"}))
        ticket = _last(history, "route_dispute", ok=True)
        if ticket is None:
            return say("The reminder cap is reached: hand the invoice to people.", (
                "route_dispute", {"invoice_id": inv_id, "team": "collections",
                                  "summary": f"{inv_id} is unpaid after {reminders} reminders "
                                             "and the customer has not replied."}))
        return say(f"{inv_id} is with the collections team.", ("finish", {"result": {
            "outcome": "handed_to_collections", "invoice_id": inv_id,
            "reminders_sent": reminders, "ticket": ticket.field("ticket_id")}}))


def _last(history: list[Turn], name: str, *, ok: bool | None = None) -> Turn | None:
    for t in reversed(history):
        if t.name == name and (ok is None or t.ok == ok):
            return t
    return None
