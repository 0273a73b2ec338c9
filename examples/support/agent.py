"""The per-ticket agent: underway's :class:`~underway.agent.Agent` with one addition, a
durable wait for the customer.

When the agent asks the customer for missing details (``request_details``), the run stops
and waits for the ``customer_replied`` signal, holding no worker. Intake delivers that
signal when the desk reports the customer's answer; the agent then tells the model that
the customer answered, and the model reads the ticket again through the untrusted
``read_ticket`` tool (the reply's text never enters the conversation any other way). If
no answer arrives within ``reply_timeout_s``, the ticket is escalated to a person.
"""

from __future__ import annotations

import weakref

from underway.agent import Agent, AgentInput, AgentState
from underway.effects import Model
from underway.flow import Goto, Next, RunContext
from underway.guard.budgets import Budget
from underway.guard.policy import Policy
from underway.models.types import Message, ToolCall

from .brain import REPLY_NOTE
from .tools import DeskTools

CUSTOMER_REPLIED = "customer_replied"
"""The signal a run waits for after asking the customer for details."""
AFTER_REPLY = "customer_replied"
"""The step that continues once the customer answered (or did not)."""

INSTRUCTIONS = """\
You are the support agent for one ticket of an online shop's help desk. Answer the
customer from the help center, ask the customer for the order number when an order
question lacks one, and escalate to a person anything you cannot settle. Give the
ticket's priority exactly when you send a reply. Never close a ticket the customer has
not confirmed resolved; refunds are issued only by the billing team."""

Ctx = RunContext[AgentState, AgentInput]


class SupportAgent(Agent):
    """An :class:`~underway.agent.Agent` over the desk's tools that, after asking the
    customer for details, waits durably for their answer (at most ``reply_timeout_s``)
    and escalates the ticket when none comes."""

    def __init__(self, name: str, *, model: Model, tools: DeskTools, policy: Policy,
                 reply_timeout_s: float, budget: Budget | None = None) -> None:
        super().__init__(
            name, model=model, instructions=INSTRUCTIONS, policy=policy, budget=budget,
            tools=[tools.read_ticket, tools.search_help_center, tools.request_details,
                   tools.draft_reply, tools.send_reply, tools.escalate_ticket,
                   tools.close_ticket],
            # A ticket that talks to the agent provokes a few refused actions before the
            # agent escalates it on its own; more than that and it asks a lead.
            max_failures=5, max_iterations=20, approver_role="support_lead",
        )
        self.desk = tools
        self.reply_timeout_s = reply_timeout_s
        self._asked: weakref.WeakSet[Ctx] = weakref.WeakSet()
        """Step executions in which the customer was asked for details."""
        self.flow.step(self._customer_replied, name=AFTER_REPLY)

    async def perform(self, ctx: Ctx, call: ToolCall, why: str) -> Next | None:
        nxt = await super().perform(ctx, call, why)
        if call.name == self.desk.request_details.name and ctx.state.failures == 0:
            self._asked.add(ctx)
        return nxt

    async def act(self, ctx: Ctx) -> Next:
        # The wait starts once every call of the model's turn has its result, so the
        # conversation the model sees next is whole.
        nxt = await super().act(ctx)
        if ctx in self._asked and isinstance(nxt, Goto):
            return ctx.wait(CUSTOMER_REPLIED, timeout=self.reply_timeout_s, then=AFTER_REPLY)
        return nxt

    async def _customer_replied(self, ctx: Ctx) -> Next:
        ticket_id = str(ctx.input.context.get("ticket_id", ""))
        if ctx.timed_out:
            reason = (f"the customer did not answer the request for details within "
                      f"{self.reply_timeout_s:g}s")
            await ctx.call(self.desk.escalate_ticket, {"ticket_id": ticket_id,
                                                       "reason": reason})
            return ctx.done({"result": {"outcome": "escalated", "ticket_id": ticket_id,
                                        "reason": reason},
                             "iterations": ctx.state.iterations})
        event = ctx.signal if isinstance(ctx.signal, dict) else {}
        note = Message.user(f"{REPLY_NOTE} Read the ticket again to see the answer "
                            f"(desk event {event.get('idempotency_key', '?')}).")
        ctx.state.messages.append(note.model_dump(mode="json", exclude_defaults=True))
        return ctx.goto("act")
