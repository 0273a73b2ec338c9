"""The same agent made durable: three lines of options, and a way to ask the shop.

``lookup_order`` changes nothing and its answers are the shop's own records (trusted);
``refund`` moves money: it is journaled before it runs, and if a worker dies while it
is in flight, ``was_paid`` asks the shop whether the refund went through instead of
paying it again.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits

from underway import Reconciled
from underway.integrations.pydantic_ai import DurableAgent, call_info

from .agent import ShopAccess, make_agent


def durable_refunds(shop_url: str, model: Model | None = None) -> DurableAgent:
    """The refunds agent as an underway flow named ``refunds``."""

    async def was_paid(key: str) -> Reconciled:
        def ask() -> dict[str, object]:
            with urllib.request.urlopen(f"{shop_url}/refunds/{key}", timeout=30) as resp:
                found: dict[str, object] = json.loads(resp.read())
                return found

        paid = (await asyncio.to_thread(ask))["paid"]
        if not isinstance(paid, dict):
            return Reconciled.not_happened()
        return Reconciled.happened(f"refund {paid['id']} of ₹{paid['amount']} paid")

    return DurableAgent(
        make_agent(model), name="refunds",
        deps=lambda: ShopAccess(shop_url, refund_key=lambda: call_info().key),
        tools={
            "lookup_order": {"mutating": False, "trusted_output": True},
            "refund": {"reconcile": was_paid, "amount": "amount", "currency": "INR"},
        },
        usage_limits=UsageLimits(request_limit=5),
    )
