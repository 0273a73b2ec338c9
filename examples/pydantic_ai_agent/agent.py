"""The agent, as any pydantic-ai user writes it: nothing here knows about underway.

Its model is a deterministic brain (a ``FunctionModel``): it looks the order up, refunds
it, and says so. Point ``--model-url`` at an OpenAI-compatible server to use pydantic-ai's
``OpenAIChatModel`` instead; the rest is the same.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel


@dataclass
class ShopAccess:
    """The agent's dependencies: where the shop answers, and the refund's key."""

    url: str
    refund_key: Any = None
    """Returns the idempotency key of the refund being paid (the durable run's own)."""


def _call(url: str, body: Any = None, key: str | None = None) -> Any:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["idempotency-key"] = key
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers),
                                timeout=30) as resp:
        return json.loads(resp.read())


def brain(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look the order up, refund its amount, then report."""
    text = json.dumps([str(p) for m in messages for p in m.parts])
    order = re.findall(r"A-\d{4}", text)[0]
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order": order})])
    if len(returns) == 1:
        found = returns[0].content
        amount = found["amount"] if isinstance(found, dict) else 0
        return ModelResponse(parts=[ToolCallPart("refund", {"order": order, "amount": amount})])
    paid = returns[-1].content
    return ModelResponse(parts=[TextPart(f"Refunded {order}: {paid}")])


def make_agent(model: Model | None = None) -> Agent[ShopAccess, str]:
    """The refunds agent."""
    agent = Agent(model or FunctionModel(brain), deps_type=ShopAccess,
                  instructions="You handle refund requests for damaged or lost orders.")

    @agent.tool
    def lookup_order(ctx: RunContext[ShopAccess], order: str) -> dict[str, Any]:
        """The order's customer, amount and status."""
        found: dict[str, Any] = _call(f"{ctx.deps.url}/orders/{order}")
        return found

    @agent.tool
    def refund(ctx: RunContext[ShopAccess], order: str, amount: int) -> str:
        """Refund ``amount`` rupees for ``order``."""
        paid = _call(f"{ctx.deps.url}/refunds", {"order": order, "amount": amount},
                     key=ctx.deps.refund_key() if ctx.deps.refund_key else str(uuid.uuid4()))
        return f"refund {paid['id']} of ₹{paid['amount']} paid"

    return agent
