"""A tool's call, bounded by its timeout, without a timer for a call that never waits.

Most of a no-op or cached tool's cost, when it returns without awaiting anything, was the
timer :func:`asyncio.timeout` arms and cancels around it. :func:`bounded` runs the call's
coroutine up to its first suspension first: a call that finishes there returns at once
(nothing can time out while no other code runs); one that suspends is handed on to the
event loop under a timeout whose deadline was taken before the call began, as
``asyncio.timeout`` would have taken it. The call runs in the caller's task either way, so
cancellation, context variables and ``asyncio.current_task()`` are what they were.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

_T = TypeVar("_T")


async def bounded(call: Awaitable[_T], timeout: float | None) -> _T:
    """``await call``, raising :class:`TimeoutError` when it takes more than ``timeout``
    seconds (None: no limit), as ``async with asyncio.timeout(timeout)`` would."""
    if type(call) is not types.CoroutineType:
        async with asyncio.timeout(timeout):
            return await call
    coro: Coroutine[Any, Any, _T] = call
    deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
    try:
        first = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    async with asyncio.timeout_at(deadline):
        return await _resumed(coro, first)


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, _T], pending: Any) -> Generator[Any, Any, _T]:
    """The rest of ``coro``, which yielded ``pending`` to the event loop on its way."""
    try:
        yield pending
    except GeneratorExit:
        coro.close()
        raise
    except BaseException as exc:  # a cancellation (the timeout's own, too), thrown in
        try:
            pending = coro.throw(exc)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        return (yield from _resumed(coro, pending))
    # The event loop resumes a task with send(None), as it would have resumed ``coro``.
    return (yield from coro)  # type: ignore[no-any-return]
