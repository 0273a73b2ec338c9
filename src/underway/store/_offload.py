"""How async code reaches a store: never synchronously on the event loop.

Every store call made from async code — the engine's activations and commits, the
worker's claims and hand-backs, a tenant's usage read for a budget or a policy, the
runner, schedules — goes through :func:`run_io`. It runs the call on the store's own I/O
threads (:class:`Offload`, the store's ``offload``) and awaits the result, so one run's
database round trip never holds up the loop that drives the others. The in-memory store
is the one exception: it does no I/O, so its calls run inline (:data:`INLINE`).

A call does as much as it can in one trip: a sync function that makes several store calls
(an activation's load reads the run row, the journal and the inbox) runs as one job.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..errors import StoreError

_T = TypeVar("_T")

IDLE_EXIT_S = 60.0
"""Seconds an I/O thread waits for work before it ends (another starts when needed)."""

_Job = tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], contextvars.Context,
             Callable[..., Any], tuple[Any, ...]]


class Runs(Protocol):
    """Where a store's calls run for async code."""

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``'s result, computed off the event loop."""
        ...

    def close(self) -> None:
        """Let the calls in progress end; start no more threads."""
        ...


class Inline:
    """For a store that does no I/O (:class:`~underway.store.MemoryStore`): its calls are
    dictionary operations under a lock, never a wait on a disk or a network, and run inline."""

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``, called now."""
        return fn(*args)

    def close(self) -> None:
        """Nothing to close."""


INLINE = Inline()
"""The :class:`Inline` every in-memory store shares."""


class Offload:
    """Up to ``threads`` threads that run one store's blocking calls for async code.

    Threads start when calls are waiting and none is idle, and end after
    :data:`IDLE_EXIT_S` without work. A call runs in a copy of its caller's context (as
    with :func:`asyncio.to_thread`), so it knows the run it was made for
    (:func:`underway.subjects.acting_run`). A call's result (or exception) is handed back to
    the loop that awaits it; a call whose waiter was cancelled before it started is never
    made, one already running finishes and its result is dropped (as with
    :func:`asyncio.to_thread`).
    """

    def __init__(self, threads: int, *, name: str) -> None:
        if threads < 1:
            raise ValueError(f"an Offload needs at least one thread, not {threads}")
        self.threads = threads
        self.name = name
        self._closed = False
        self._forget_threads()
        _every.add(self)

    def _forget_threads(self) -> None:
        """Start afresh with no thread (also in a child process after a fork, which has
        none of its parent's)."""
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._idle = 0
        """Threads waiting for a job (or about to)."""
        self._waiting = 0
        """Jobs put and not yet taken."""

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``'s result, computed on one of this store's threads."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.name}: the store is closed")
            self._waiting += 1
            if self._waiting > self._idle and len(self._workers) < self.threads:
                worker = threading.Thread(
                    target=self._serve, name=f"{self.name}-{len(self._workers) + 1}",
                    daemon=True,
                )
                self._workers.append(worker)
                self._idle += 1
                worker.start()
        self._jobs.put((loop, done, contextvars.copy_context(), fn, args))
        return await done

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:
                    if self._waiting >= self._idle:
                        continue  # a job is on its way to this thread
                    self._idle -= 1
                    if me in self._workers:
                        self._workers.remove(me)
                    return
            with self._lock:
                self._idle -= 1
                if job is None:
                    return
                self._waiting -= 1
            loop, done, context, fn, args = job
            result: Any = None
            failed: BaseException | None = None
            ran = not done.cancelled()
            if ran:
                try:
                    result = context.run(fn, *args)
                except BaseException as exc:
                    failed = exc
            with self._lock:
                self._idle += 1
            if ran:
                # The last thing before waiting again: the waiter wakes to a free GIL.
                _hand_back(loop, done, result, failed)
            del job, loop, done, context, fn, args, result, failed

    def close(self) -> None:
        """Let the calls already submitted end, then stop the threads (not waiting for
        one that is the caller). Calls made afterwards raise :class:`StoreError`."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for _ in workers:
            self._jobs.put(None)
        me = threading.current_thread()
        for worker in workers:
            if worker is not me:
                worker.join()


def _hand_back(
    loop: asyncio.AbstractEventLoop, done: asyncio.Future[Any], result: Any,
    exc: BaseException | None,
) -> None:
    # A closed loop raises RuntimeError: nobody waits for this result any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, done, result, exc)


def _settle(done: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if done.done():
        return  # its waiter was cancelled
    if exc is None:
        done.set_result(result)
    elif isinstance(exc, StopIteration):
        done.set_exception(RuntimeError(f"a store call raised {exc!r}"))
    else:
        done.set_exception(exc)


_every: weakref.WeakSet[Offload] = weakref.WeakSet()


def _after_fork() -> None:
    for offload in list(_every):
        offload._forget_threads()


os.register_at_fork(after_in_child=_after_fork)

_shared: Offload | None = None
_shared_lock = threading.Lock()


def offload_of(store: object) -> Runs:
    """Where ``store``'s calls run for async code: its own ``offload`` (a wrapper that
    delegates attributes finds the wrapped store's), else threads shared by every store
    that has none."""
    found = getattr(store, "offload", None)
    if isinstance(found, Offload | Inline):
        return found
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Offload(8, name="underway-io")
        return _shared


async def run_io(store: object, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` — a call that reaches ``store`` — run off the event loop and
    awaited: the one way async code calls a store."""
    return await offload_of(store).run(fn, *args)
