"""The collections agent: its model, tools, policy, budget and instructions."""

from __future__ import annotations

from pathlib import Path

from underway import Tool
from underway.agent import Agent
from underway.effects import Model
from underway.guard.budgets import Budget
from underway.guard.policy import load_policy
from underway.models import from_env
from underway.testing import RuleModel

from . import playbook
from .brain import MODEL_NAME, WAIT_DAYS, CollectionsBrain
from .tools import ServiceUrls, make_tools

NAME = "collections"
POLICY_FILE = Path(__file__).with_name("policy.toml")
BUDGET = Budget(tokens=150_000, model_calls=40, messages=5, on_exceed="escalate")
"""Per run. The policy caps reminders at three (a refusal the agent can act on); the
budget's message limit is the hard stop behind it, should a policy change let more out."""
MAX_REPLY_TOKENS = 1024
"""Each reply's bound: the token budget counts a call at most this much output."""
BRAIN_PRICE_PER_1K_TOKENS = 0.00015
"""A notional price for the rule-based brain, so the demo's cost accounting shows figures."""


def instructions(day_seconds: float) -> str:
    """What the agent is told, with the length of a day in this environment."""
    wait = WAIT_DAYS * day_seconds
    return f"""\
You are the accounts-receivable agent of a distributor in India. Your goal is to get one
overdue invoice paid, politely and within policy. Amounts are in INR.

Each round: look up the invoice (lookup_invoice) and check the payment
(check_payment_status). Then:
- paid: if the customer paid more than the balance, refund the difference (issue_refund);
  then finish.
- the invoice shows a dispute: recall the playbook, route the dispute to the 'disputes'
  team (route_dispute), propose a write-off of the disputed amount (write_off), and once
  it is done tell the customer the corrected balance (send_reminder, template
  balance_corrected).
- not paid: send one reminder (first_reminder, second_reminder, then final_reminder) and
  wait {WAIT_DAYS} days before the next round. In this environment a day lasts
  {day_seconds:g} seconds: call wait with seconds={wait:g}.
- after three reminders: hand the invoice to the 'collections' team (route_dispute), then
  finish.
Reminders are polite and factual: never threaten or pressure. Refunds and write-offs above
5,000 INR wait for a finance approver; just propose them with a clear reason. Finish with
a result object: outcome (paid, dispute_open or handed_to_collections) and invoice_id."""


def default_model(day_seconds: float) -> Model:
    """The model named by ``UNDERWAY_MODEL`` when set, else the rule-based brain."""
    real = from_env()
    if real is not None:
        return real
    return RuleModel(CollectionsBrain(day_seconds), name=MODEL_NAME,
                     cost_per_1k_tokens=BRAIN_PRICE_PER_1K_TOKENS)


def build_agent(data: Path, *, day_seconds: float, model: Model | None = None) -> Agent:
    """The agent, its tools bound to the services whose URLs are in ``data``."""
    tools: list[Tool] = [*make_tools(ServiceUrls.load(data)), playbook.recall(data)]
    return Agent(
        NAME,
        model=model or default_model(day_seconds),
        tools=tools,
        instructions=instructions(day_seconds),
        policy=load_policy(POLICY_FILE),
        budget=BUDGET,
        max_iterations=30,
        approver_role="finance",
        max_tokens=MAX_REPLY_TOKENS,
    )
