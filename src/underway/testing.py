"""Helpers for testing flows and agents in milliseconds: in-memory engine, manual clock,
scripted model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .clock import ManualClock
from .effects import Emit, ModelQuote, ModelReply, Tool
from .engine import Engine
from .events import JSON
from .flow import Flow
from .models.types import ModelRequest, ModelResponse, ToolCall
from .store.memory import MemoryStore

__all__ = ["ManualClock", "MemoryStore", "RuleModel", "ScriptedModel", "memory_engine", "say"]


class ScriptedModel:
    """A model that returns scripted responses in order and records each request.

    Each response is charged ``tokens_in`` = request size in characters / 4. It is charged
    ``tokens_out`` = response size / 4. A scripted :class:`~underway.models.ModelResponse`
    is returned with its own usage.

    Args:
        responses: The responses, in order.
        name: The model's name.
        cost_per_token: USD charged per estimated token.
    """

    def __init__(
        self, responses: Sequence[JSON], *, name: str = "scripted", cost_per_token: float = 0.0
    ) -> None:
        self.name = name
        self.responses = list(responses)
        self.requests: list[JSON] = []
        self.cost_per_token = cost_per_token

    async def complete(self, request: JSON) -> ModelReply:
        """The next scripted response."""
        reply = self._next(request)
        self.requests.append(request)
        return reply

    def quote(self, request: JSON) -> ModelQuote:
        """Exactly what the next scripted response will spend."""
        reply = self._next(request)
        return ModelQuote(reply.tokens_in + reply.tokens_out, reply.cost_usd)

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        """The next scripted response, its text emitted a word at a time first, then each
        tool call (``ctx.model(..., stream=True)``)."""
        reply = self._next(request)
        for delta in _deltas(reply.response):
            await emit(delta)
        self.requests.append(request)
        return reply

    def _next(self, request: JSON) -> ModelReply:
        if len(self.requests) >= len(self.responses):
            raise RuntimeError(f"scripted model {self.name!r} ran out of responses")
        response = self.responses[len(self.requests)]
        if isinstance(response, ModelResponse):
            r = response
            return ModelReply(r.to_json(), r.model, r.tokens_in, r.tokens_out, r.cost_usd)
        tin, tout = len(str(request)) // 4, len(str(response)) // 4
        return ModelReply(response, self.name, tin, tout, (tin + tout) * self.cost_per_token)


def _deltas(response: JSON) -> list[JSON]:
    """The deltas a streaming provider would send for ``response``: its text in words, then
    its tool calls whole."""
    if not isinstance(response, dict):
        return []
    text = response.get("text")
    out: list[JSON] = [{"type": "text", "text": w}
                       for w in re.findall(r"\S+\s*|\s+", text)] if isinstance(text, str) else []
    for i, call in enumerate(response.get("tool_calls") or []):
        if isinstance(call, dict):
            out.append({"type": "tool_call", "index": i, "id": call.get("id"),
                        "name": call.get("name"), "arguments": call.get("raw_arguments")
                        or json.dumps(call.get("arguments") or {})})
    return out


def memory_engine(
    flows: Iterable[Flow[Any, Any]] = (), tools: Iterable[Tool] = (), *, start: float = 1.7e9
) -> tuple[Engine, ManualClock]:
    """An engine on a fresh in-memory store with a manual clock.

    Args:
        flows: The flows it runs.
        tools: The tools they call.
        start: The clock's first time (epoch seconds).

    Returns:
        The engine and its clock.
    """
    clock = ManualClock(start)
    store = MemoryStore()
    store.migrate()
    return Engine(store, flows=flows, tools=tools, clock=clock), clock


class RuleModel:
    """A deterministic model whose answer is a function of the request.

    Unlike :class:`ScriptedModel`, it needs no memory of earlier calls. So a process that
    restarts mid-run (or a replay) gets the same answers. Usage is estimated at four
    characters per token.

    Args:
        decide: Receives the :class:`~underway.models.ModelRequest`. Returns a
            :class:`~underway.models.ModelResponse` (or its JSON).
        name: The model's name.
        cost_per_1k_tokens: USD charged per thousand estimated tokens.
    """

    def __init__(
        self, decide: Callable[[ModelRequest], ModelResponse | JSON], *, name: str = "rules",
        cost_per_1k_tokens: float = 0.0,
    ) -> None:
        self.name = name
        self.decide = decide
        self.cost_per_1k_tokens = cost_per_1k_tokens
        self.calls = 0

    async def complete(self, request: JSON) -> ModelReply:
        """Answer ``request`` by the rules."""
        self.calls += 1
        return self._answer(request)

    def quote(self, request: JSON) -> ModelQuote:
        """Exactly what the answer to ``request`` will spend (the rules are a function)."""
        reply = self._answer(request)
        return ModelQuote(reply.tokens_in + reply.tokens_out, reply.cost_usd)

    def _answer(self, request: JSON) -> ModelReply:
        req = ModelRequest.from_json(request)
        out = self.decide(req)
        resp = out if isinstance(out, ModelResponse) else ModelResponse.from_json(
            {"model": self.name, **out} if isinstance(out, dict) else out
        )
        tin, tout = len(json.dumps(request)) // 4, len(resp.model_dump_json()) // 4
        cost = (tin + tout) * self.cost_per_1k_tokens / 1000
        resp = resp.model_copy(update={"tokens_in": tin, "tokens_out": tout, "cost_usd": cost,
                                       "model": resp.model or self.name})
        return ModelReply(resp.to_json(), resp.model, tin, tout, cost)


def say(text: str | None = None, *calls: tuple[str, JSON], model: str = "rules") -> ModelResponse:
    """A model response: optional text and tool calls given as ``(name, arguments)``."""
    return ModelResponse(
        text=text, model=model,
        tool_calls=[ToolCall.from_arguments(f"call_{i}", n, a) for i, (n, a) in enumerate(calls)],
        stop_reason="tool_calls" if calls else "end_turn",
    )
