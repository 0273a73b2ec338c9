"""The refund desk: an OpenAI Agents SDK agent as its authors wrote it, then made durable.

``refund_desk`` is plain Agents SDK code. ``durable_desk`` is the one underway adds: the
same agent, run by underway, with underway's options for each tool.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI

import underway as uw
from underway.integrations.openai_agents import DurableAgent, current_call

ORDERS: dict[str, dict[str, Any]] = {
    "1001": {"status": "shipped", "amount": 1200},
    "1002": {"status": "delivered", "amount": 2500},
    "1003": {"status": "delivered", "amount": 99000},
}
"""The shop's orders (amounts in rupees)."""

PAYMENTS = "http://127.0.0.1:0"
"""The payments service; set by :func:`durable_desk`."""


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@function_tool
def look_up_order(order_id: str) -> str:
    """An order's status and amount."""
    return json.dumps({"order_id": order_id, **ORDERS[order_id]})


@function_tool(needs_approval=True)
async def issue_refund(order_id: str, amount: int) -> str:
    """Refund an order. A manager approves every refund."""
    # The call's idempotency key goes with the request: the payments service refunds a key
    # once, and underway can ask it later whether a refund went through.
    body = {"key": current_call().key, "order_id": order_id, "amount": amount}
    out = await asyncio.to_thread(_http, "POST", f"{PAYMENTS}/refunds", body)
    return f"refund {out['refund_id']} of {amount} INR issued"


async def refund_went_through(key: str) -> uw.Reconciled:
    """After a crash hid a refund's outcome: ask the payments service."""
    found = await asyncio.to_thread(_http, "GET", f"{PAYMENTS}/refunds/{key}")
    if found is None:
        return uw.Reconciled.not_happened()
    return uw.Reconciled.happened(f"refund {found['refund_id']} of {found['amount']} INR issued")


def model_client(model_url: str) -> AsyncOpenAI:
    """A client of the model server at ``model_url``."""
    return AsyncOpenAI(base_url=model_url, api_key="unused", max_retries=0)


def refund_desk(client: AsyncOpenAI) -> Agent[Any]:
    """The agent, as written for the Agents SDK."""
    return Agent(
        "refund_desk",
        instructions="Answer questions about orders. Refund an order when asked.",
        tools=[look_up_order, issue_refund],
        model=OpenAIChatCompletionsModel("gpt-4o-mini", client),
    )


def durable_desk(client: AsyncOpenAI, payments_url: str) -> DurableAgent:
    """The same agent run by underway: the order lookup reads the shop's own database
    (read-only, trusted); a refund is reconciled with the payments service after a crash."""
    global PAYMENTS
    PAYMENTS = payments_url
    return DurableAgent(refund_desk(client), tools={
        "look_up_order": {"read_only": True, "trusted_output": True},
        "issue_refund": {"reconcile": refund_went_through, "amount": "amount",
                         "currency": "INR", "money_direction": "out",
                         "summary": "Refund {amount:money} for order {order_id}"},
    })
