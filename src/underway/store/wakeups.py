"""Wake-ups: how an idle worker hears that work may have come due, without asking.

A store hands a worker a :class:`Wakeups` (:meth:`Store.wakeups
<underway.store.base.Database.wakeups>`). PostgreSQL pushes: a new run, a signal or a run
handed back sends a notification, and the worker listening for it wakes at once. The
others push nothing (:class:`Polling`): the worker finds new work by looking again, at the
pace its ``poll`` options set. Either way the worker also wakes at the earliest due time
it computed, so timers never depend on a notification.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

__all__ = ["RETRY_MAX_S", "AnyOf", "Polling", "Wakeups"]


class Wakeups(Protocol):
    """A source of wake-ups for one worker."""

    @property
    def listening(self) -> bool:
        """True while new runs and signals are pushed: the worker need not poll for them."""
        ...

    def watch(self, queues: list[str] | None, *, retry: float) -> AsyncIterator[None]:
        """Yield each time work of ``queues`` (any queue when None) may have arrived,
        until cancelled — and once whenever listening (re)starts, since what was sent
        while nobody listened is lost. A broken connection is retried after ``retry``
        seconds, doubling up to :data:`RETRY_MAX_S`; meanwhile :attr:`listening` is False.
        A source that pushes nothing ends at once."""
        ...

    def announce(self, queues: list[str]) -> None:
        """Tell listening workers that runs of ``queues`` are ready again (a stopping
        worker handed them back)."""
        ...


RETRY_MAX_S = 5.0
"""The longest a source waits between attempts to get its listening connection back."""


class Polling:
    """The :class:`Wakeups` of a store that pushes nothing: the worker polls."""

    @property
    def listening(self) -> bool:
        """Never: new work is found by looking."""
        return False

    async def watch(self, queues: list[str] | None, *, retry: float) -> AsyncIterator[None]:
        """Ends at once: there is nothing to hear."""
        for _ in ():
            yield

    def announce(self, queues: list[str]) -> None:
        """Nobody listens: nothing to tell."""


class AnyOf:
    """The :class:`Wakeups` of several stores (the regions of a
    :class:`~underway.store.regional.RegionalStore`): a wake-up from any of them wakes the
    worker; it listens only while every one of them pushes."""

    def __init__(self, sources: Sequence[Wakeups]) -> None:
        self._sources = list(sources)

    @property
    def listening(self) -> bool:
        """True while every source pushes (else the worker polls)."""
        return all(s.listening for s in self._sources)

    async def watch(self, queues: list[str] | None, *, retry: float) -> AsyncIterator[None]:
        """Yield whenever any source does; end when every source has ended."""
        heard: asyncio.Queue[None] = asyncio.Queue()

        async def pump(source: Wakeups) -> None:
            async for _ in source.watch(queues, retry=retry):
                heard.put_nowait(None)

        pumps = [asyncio.ensure_future(pump(s)) for s in self._sources]
        try:
            while True:
                live = [p for p in pumps if not p.done()]
                if not live and heard.empty():
                    for p in pumps:
                        p.result()  # a source's failure is the watch's
                    return
                got = asyncio.ensure_future(heard.get())
                done, _ = await asyncio.wait([got, *live],
                                             return_when=asyncio.FIRST_COMPLETED)
                if got in done:
                    yield
                else:
                    got.cancel()
                for p in done - {got}:
                    p.result()
        finally:
            for p in pumps:
                p.cancel()

    def announce(self, queues: list[str]) -> None:
        """Tell every source's listening workers."""
        for s in self._sources:
            s.announce(queues)
