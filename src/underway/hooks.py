"""The one way the runtime calls a user's hook around an effect: a tool's ``reconcile``
(what happened to a call of unknown outcome), its ``compensate`` (undo a completed call),
and a notifier's ``notify`` (tell people a run waits for them).

:func:`call_hook` bounds the hook in time and reads its answer. A hook that raises
(any exception, a :class:`~underway.errors.ToolCallError` too, and any ``BaseException``
but the caller's cancellation or the process stopping), answers with the wrong type or nothing, or
gives no answer in time raises :class:`HookFailed`, naming the hook and the reason. A plain
function's hook runs on a thread of its own, where the process stopping is never raised:
a ``SystemExit`` or ``KeyboardInterrupt`` it raises is its failure too. The
engine turns that into an escalation: a person settles the call, and the step is never
told the call failed (it would try again under new keys).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_HOOK_TIMEOUT", "HookFailed", "call_hook", "notify"]

DEFAULT_HOOK_TIMEOUT = 30.0
"""Seconds a hook may take by default (``Tool(hook_timeout=...)`` changes it per tool)."""

_PASSING = (KeyboardInterrupt, SystemExit)
"""What a hook may raise that is no answer about the effect: the process is stopping. The
run keeps what its journal holds, and the next worker asks again. (The caller's own
cancellation passes too; a cancellation the hook raised of itself is a failure.)"""

log = logging.getLogger("underway.worker")


class HookFailed(BaseException):
    """A hook did not answer: it raised, answered with the wrong thing, or ran past its
    time. A ``BaseException``, so step code that catches ``Exception`` cannot take it
    for a tool's failure.

    Args:
        hook: Which hook (``reconcile``, ``compensate``, ``notify``).
        owner: Whose hook it is (``tool 'transfer'``).
        reason: What went wrong, in words.
    """

    def __init__(self, hook: str, owner: str, reason: str) -> None:
        super().__init__(f"the {hook} hook of {owner} {reason}")
        self.hook, self.owner, self.reason = hook, owner, reason

    @property
    def message(self) -> str:
        """The failure in one sentence, naming the hook and its owner."""
        return str(self)


async def call_hook(
    hook: str, owner: str, fn: Callable[..., Any], *args: Any, timeout: float,
    answer: Callable[[Any], str | None] | None = None,
) -> Any:
    """Call ``fn(*args)`` as the hook ``hook`` of ``owner`` and return its answer.

    A coroutine function runs as a task of its own and any other function on a thread,
    so a hook that never returns, or that ignores its cancellation, is left behind once
    ``timeout`` seconds have passed instead of holding the run.

    Args:
        hook: The hook's name, for the reason.
        owner: Whose hook it is, for the reason.
        fn: The hook.
        args: What it is called with.
        timeout: Seconds it may take.
        answer: Checks the answer: None when it is one, else what is wrong with it.

    Raises:
        HookFailed: The hook raised, gave a wrong answer or none in time.
    """
    if inspect.iscoroutinefunction(fn):
        task: asyncio.Future[Any] = asyncio.ensure_future(fn(*args))
    else:
        task = _on_own_thread(fn, args)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_forget)
        raise HookFailed(hook, owner, f"gave no answer within {timeout:g}s")
    try:
        out = task.result()
    except _PASSING:
        raise
    except BaseException as exc:
        raised = exc.raised if isinstance(exc, _Raised) else exc
        raise HookFailed(hook, owner, f"raised {type(raised).__name__}: {raised}") from raised
    if inspect.isawaitable(out):
        # A plain function that returned a coroutine: its answer is what that gives.
        return await call_hook(hook, owner, _awaiting(out), timeout=timeout, answer=answer)
    problem = answer(out) if answer is not None else None
    if problem is not None:
        raise HookFailed(hook, owner, problem)
    return out


async def notify(notifier: Any, notice: Any, run_id: str, *, timeout: float) -> None:
    """Hand ``notice`` (already redacted) to ``notifier.notify`` through
    :func:`call_hook`. The request it tells of is durable and in the inbox, so a notifier
    that raises or runs past ``timeout`` is only logged, naming it: a notice is a
    courtesy, and the run waits for a person all the same.

    Args:
        notifier: Has ``async def notify(notice)``.
        notice: What to tell.
        run_id: The run it is about, for the log line.
        timeout: Seconds the notifier may take.
    """
    try:
        await call_hook("notify", f"notifier {type(notifier).__name__}", notifier.notify,
                        notice, timeout=timeout)
    except HookFailed as failed:
        log.warning("run %s: %s; it waits for a person all the same", run_id, failed.message)


def _on_own_thread(fn: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future[Any]:
    """``fn(*args)`` on a daemon thread of its own, as a future of the running loop. Not
    the loop's default executor: a hook left behind past its time would hold up the
    loop's shutdown there, and a worker's stop with it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            out = context.run(fn, *args)
        except _PASSING as exc:
            # Raised by the hook itself (signals stop the main thread, not this one).
            done: Callable[[], None] = functools.partial(future.set_exception, _Raised(exc))
        except BaseException as exc:  # handed to the caller, who judges it
            done = functools.partial(future.set_exception, exc)
        else:
            done = functools.partial(future.set_result, out)
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
            loop.call_soon_threadsafe(settle, done)

    threading.Thread(target=run, name="underway-hook", daemon=True).start()
    return future


class _Raised(Exception):
    """A ``SystemExit`` or ``KeyboardInterrupt`` a hook raised on its own thread, carried
    to the caller as the hook's failure rather than as the process stopping."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(repr(raised))
        self.raised = raised


def _awaiting(awaitable: Any) -> Callable[[], Any]:
    async def wait() -> Any:
        return await awaitable
    return wait


def _forget(task: asyncio.Future[Any]) -> None:
    """Collect what a hook left behind ends with, so nothing is reported as unretrieved."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("a hook that ran past its time ended later with %r", task.exception())
