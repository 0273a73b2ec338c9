"""Model adapters, routing and cost accounting.

Build a :class:`ModelRequest`, pass ``request.to_json()`` to ``ctx.model(adapter, ...)`` and
read the answer with :meth:`ModelResponse.from_json`. The engine journals both with the
model id, tokens and cost; a re-run reads the journal instead of asking again.

- :class:`OpenAIChat`: OpenAI Chat Completions and compatible local servers;
- :class:`AnthropicMessages`: the Anthropic Messages API;
- :class:`ModelRouter`: picks an adapter by the request's ``kind``, with per-route budgets
  computed from the journal;
- :class:`PriceTable`: USD per million tokens, by model id or pattern;
- :func:`from_env`: an adapter from ``UNDERWAY_MODEL``.

Provider SDKs are imported only when an adapter is built: ``pip install 'underway[openai]'``
or ``'underway[anthropic]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .errors import ModelError
from .routing import (
    BudgetBreach,
    ModelRouter,
    RouteBudget,
    RouteBudgetExceeded,
    RouteUsage,
    budget_breaches,
    route_usage,
)

# Routing loads with the package (budgets read route budgets for every model call); the
# adapters, request and response types, prices and retries load the first time they are
# named (PEP 562), so a process that routes no model through them never loads them.
if TYPE_CHECKING:
    from .anthropic_messages import AnthropicMessages
    from .env import from_env
    from .openai_chat import OpenAIChat
    from .pricing import MaintainedPrice, Price, PriceTable
    from .retries import DEFAULT_RETRY, RetryNotice
    from .types import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "AnthropicMessages": ".anthropic_messages", "from_env": ".env",
        "OpenAIChat": ".openai_chat", "MaintainedPrice": ".pricing", "Price": ".pricing",
        "PriceTable": ".pricing",
        "DEFAULT_RETRY": ".retries", "RetryNotice": ".retries", "Message": ".types",
        "ModelRequest": ".types", "ModelResponse": ".types", "ToolCall": ".types",
        "ToolSpec": ".types",
    }, globals())

__all__ = [
    "DEFAULT_RETRY",
    "AnthropicMessages",
    "BudgetBreach",
    "MaintainedPrice",
    "Message",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelRouter",
    "OpenAIChat",
    "Price",
    "PriceTable",
    "RetryNotice",
    "RouteBudget",
    "RouteBudgetExceeded",
    "RouteUsage",
    "ToolCall",
    "ToolSpec",
    "budget_breaches",
    "from_env",
    "route_usage",
]
