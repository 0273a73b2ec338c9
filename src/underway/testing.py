"""Helpers for testing flows and agents in milliseconds: in-memory engine, manual clock,
scripted model."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .clock import ManualClock
from .effects import ModelReply, Tool
from .engine import Engine
from .events import JSON
from .flow import Flow
from .store.memory import MemoryStore

__all__ = ["ManualClock", "MemoryStore", "ScriptedModel", "memory_engine"]


class ScriptedModel:
    """A model that returns scripted responses in order and records each request.

    Each response is charged ``tokens_in`` = request size in characters / 4 and
    ``tokens_out`` = response size / 4, at ``cost_per_token`` each.
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
        if len(self.requests) >= len(self.responses):
            raise RuntimeError(f"scripted model {self.name!r} ran out of responses")
        response = self.responses[len(self.requests)]
        self.requests.append(request)
        tin, tout = len(str(request)) // 4, len(str(response)) // 4
        return ModelReply(response, self.name, tin, tout, (tin + tout) * self.cost_per_token)


def memory_engine(
    flows: Iterable[Flow[Any, Any]] = (), tools: Iterable[Tool] = (), *, start: float = 1.7e9
) -> tuple[Engine, ManualClock]:
    """An engine on a fresh in-memory store with a manual clock."""
    clock = ManualClock(start)
    store = MemoryStore()
    store.migrate()
    return Engine(store, flows=flows, tools=tools, clock=clock), clock
