"""Erasing knowledge whose retention period has run out.

Searches never return an expired record, so the sweeper decides only how long expired
text stays on disk: run it at least as often as your retention policy promises erasure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from ..clock import Clock, SystemClock
from ..errors import ConfigurationError, StoreError
from ..store._offload import run_io
from .base import KnowledgeBase

log = logging.getLogger("underway.knowledge")


def sweep(knowledge: KnowledgeBase, clock: Clock) -> int:
    """Erase every record expired at ``clock.now()``; return how many."""
    return knowledge.purge_expired(clock.now())


class KnowledgeSweeper:
    """Purges expired knowledge every ``every`` seconds, beside a worker::

        sweeper = KnowledgeSweeper(knowledge, every=600)
        stop = asyncio.Event()
        await asyncio.gather(worker.run(), sweeper.run(stop))

    A database failure is logged and tried again at the next pass. So a sweeper never takes
    its worker down. ``purged`` counts the records it erased, ``passes`` its passes.

    Args:
        knowledge: The knowledge base.
        clock: Decides what has expired; None means the system clock.
        every: Seconds between passes.
    """

    def __init__(
        self, knowledge: KnowledgeBase, *, clock: Clock | None = None, every: float = 3600.0
    ) -> None:
        if not every > 0:
            raise ConfigurationError(f"sweeper interval must be positive seconds, not {every!r}")
        self.knowledge = knowledge
        self.clock: Clock = clock or SystemClock()
        self.every = every
        self.purged = 0
        self.passes = 0

    def run_once(self) -> int:
        """One pass now: erase what has expired; return how many records."""
        n = sweep(self.knowledge, self.clock)
        self.purged += n
        self.passes += 1
        return n

    async def run(self, stop: asyncio.Event) -> None:
        """Pass at once and then every ``every`` seconds, until ``stop`` is set."""
        while not stop.is_set():
            try:
                n = await run_io(self.knowledge, self.run_once)
            except StoreError:
                log.exception("knowledge sweep failed; trying again in %gs", self.every)
            else:
                if n:
                    log.info("erased %d expired knowledge records", n)
            await _first(self.clock.sleep_until(self.clock.now() + self.every), stop.wait())


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Wait until the first of ``waits`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
