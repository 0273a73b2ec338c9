"""The language model protocol: what an adapter returns and what a request may spend."""

from __future__ import annotations

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


class Model(Protocol):
    """A language model adapter: ``complete(request)`` returns a :class:`ModelReply`.

    It may also have ``quote(request) -> ModelQuote``: the most the request can spend.
    """

    name: str

    async def complete(self, request: JSON) -> ModelReply:
        """Send ``request`` to the model."""
        ...
