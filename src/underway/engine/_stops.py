"""How a step stops short of completing: exceptions the executor raises inside a step and
catches around it. They derive from ``BaseException`` so step code that catches
``Exception`` cannot swallow them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from .. import events as ev


class Suspend(BaseException):
    """Ends a step without completing it: a retry timer was set (events already buffered)."""


class DeadLetter(BaseException):
    """Stops the run for an operator: the reason is journaled as ``RunDeadLettered``."""

    def __init__(self, reason: str, error_type: str) -> None:
        super().__init__(reason)
        self.reason, self.error_type = reason, error_type


class Escalate(BaseException):
    """Stops the run for a person (user code cannot swallow it: not an Exception)."""

    def __init__(
        self, reason: str, key: str | None, tool: str | None, index: int | None,
        cause: str = "other", hook: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.event = ev.Escalated(reason=reason, key=key, tool=tool, index=index, cause=cause,
                                  hook=hook)

    @classmethod
    def about(cls, event: ev.Escalated) -> Escalate:
        """Escalate with a fully formed event (a question)."""
        esc = cls(event.reason, event.key, event.tool, event.index, event.cause)
        esc.event = event
        return esc


class Unencodable(BaseException):
    """Something the step produced cannot be journaled (a result, a value or evidence that
    is not JSON): the activation's uncommitted events are dropped and the run is
    dead-lettered with the reason, instead of failing in every commit forever."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Stop(BaseException):
    """Ends the run with an event already chosen (a budget that fails the run)."""

    def __init__(self, event: ev.RunEvent) -> None:
        super().__init__(str(event))
        self.event = event



STOPS = (Suspend, DeadLetter, Escalate, Stop, Unencodable)
"""What the engine raises through a step to stop it."""

class _Stoppable(Protocol):
    broken: BaseException | None


_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound=_Stoppable)


def unswallowed(
    method: Callable[Concatenate[_S, _P], Awaitable[_R]],
) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
    """A call into the engine whose stop holds even if the step swallows it: the first
    stop raised through it is remembered (``broken``) and raised again when the step
    returns. A step that gathers calls with ``return_exceptions=True`` cannot turn a
    budget's refusal, an approval wait or an escalation into a finished step."""

    async def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(self, *args, **kwargs)
        except STOPS as stop:
            if self.broken is None:
                self.broken = stop
            raise

    wrapper.__name__, wrapper.__qualname__ = method.__name__, method.__qualname__
    wrapper.__doc__ = method.__doc__
    return wrapper
