"""The language model protocol: what an adapter returns and what a request may spend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ..events import JSON


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a model adapter returns: the response and its usage."""

    response: JSON
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelQuote:
    """The most a model request can spend, told before it is sent.

    The guard reserves it against budgets and settles to the reply's usage. ``tokens`` and
    ``cost_usd`` are upper bounds (None: no bound); ``reason`` says why one is missing.
    A model offers one through an optional ``quote(request)`` method. Without one, a call
    is refused wherever a token or cost budget applies.
    """

    tokens: int | None
    cost_usd: float | None
    reason: str | None = None


Emit = Callable[[JSON], Awaitable[None]]
"""What a streaming model calls with each delta as it arrives (:class:`StreamingModel`)."""


class Model(Protocol):
    """A language model adapter: ``complete(request)`` returns a :class:`ModelReply`.

    It may also have ``quote(request) -> ModelQuote``: the most the request can spend;
    and ``stream(request, emit) -> ModelReply`` (:class:`StreamingModel`).
    """

    name: str

    async def complete(self, request: JSON) -> ModelReply:
        """Send ``request`` to the model."""
        ...


class StreamingModel(Model, Protocol):
    """A model adapter that can stream: ``ctx.model(model, request, stream=True)`` calls
    :meth:`stream` instead of ``complete``.

    A delta is a JSON object with a ``type``: ``{"type": "text", "text": "..."}``, or
    ``{"type": "tool_call", "index": 0, "id": "...", "name": "...", "arguments": "..."}``
    (a fragment of the arguments' JSON text); an integration may add its own types.
    """

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        """Send ``request``, ``await emit(delta)`` for each delta as it arrives, and return
        the complete reply (with its usage), as :meth:`complete` would."""
        ...
