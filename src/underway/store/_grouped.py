"""Group commit's queue, shared by the engine's commits (:mod:`underway.engine._group`) and
the server's own writes (:mod:`underway.service._batch`).

Callers on one event loop hand items to :meth:`Grouped._submit`. When no group is being
written, an item is written at once, alone. While one is, the items that arrive wait, and
the moment it returns they are written together, by a task of its own (so a caller that
goes away leaves the others their answers). Under load groups form by themselves, with no
timer. A subclass says how a group is written (:meth:`Grouped._write`), and settles each
item's future.
"""

from __future__ import annotations

import asyncio
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


@dataclass
class _Line(Generic[_Item]):
    """The items waiting on one event loop, the group being written, and whether one is."""

    waiting: list[tuple[_Item, asyncio.Future[Any]]] = field(default_factory=list)
    writing: list[tuple[_Item, asyncio.Future[Any]]] = field(default_factory=list)
    busy: bool = False


class Grouped(ABC, Generic[_Item, _Result]):
    """Items written in groups of at most ``limit`` (see the module); it serves every
    event loop it is used from."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a group holds at least one item, not {limit}")
        self.limit = limit
        self._lines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Line[_Item]] = (
            weakref.WeakKeyDictionary())
        self._drains: set[asyncio.Task[None]] = set()

    async def _submit(self, item: _Item) -> _Result:
        """Write ``item`` (with whatever else is waiting); what its future is settled to."""
        loop = asyncio.get_running_loop()
        line = self._lines.get(loop)
        if line is None:
            line = self._lines[loop] = _Line()
        done: asyncio.Future[_Result] = loop.create_future()
        line.waiting.append((item, done))
        if not line.busy:
            line.busy = True
            drain = loop.create_task(self._drain(line))
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)
        return await done

    async def _drain(self, line: _Line[_Item]) -> None:
        try:
            while line.waiting:
                taken, line.waiting = line.waiting[:self.limit], line.waiting[self.limit:]
                # A caller cancelled before its group was written: its item is not written
                # (as a store call cancelled before it started is never made).
                line.writing = [(item, done) for item, done in taken if not done.done()]
                if line.writing:
                    await self._write(line.writing)
                line.writing = []
        finally:
            # Anything left means this task was cancelled (its loop is closing), or the
            # write raised: nobody will write those items, so their callers must not wait.
            for _, done in line.writing + line.waiting:
                done.cancel()
            line.busy, line.writing, line.waiting = False, [], []

    @abstractmethod
    async def _write(self, group: list[tuple[_Item, asyncio.Future[Any]]]) -> None:
        """Write ``group``'s items and settle each one's future (one not yet done)."""
