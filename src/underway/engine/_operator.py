"""The engine's operator actions: each is its client's method, typed as the client's."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ..client import Client
from ..flow import Flow

_T = TypeVar("_T")
_P = ParamSpec("_P")


class Operated(Protocol):
    """What an operator action reads of the engine: its client and its flows."""

    client: Client
    flows: dict[str, Flow[Any, Any]]

    def register(self, flow: Flow[Any, Any]) -> None:
        """Make ``flow`` runnable by the engine."""
        ...


def client_method(
    method: Callable[Concatenate[Client, _P], _T], *, registers: bool = False
) -> Callable[Concatenate[Operated, _P], _T]:
    """An engine method that is ``method`` of the engine's client, with its signature and
    documentation. ``registers``: a :class:`Flow` given first is registered beforehand."""

    @functools.wraps(method)
    def on_client(engine: Operated, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if registers and args and isinstance(args[0], Flow) and args[0].name not in engine.flows:
            engine.register(args[0])
        return method(engine.client, *args, **kwargs)

    return on_client
