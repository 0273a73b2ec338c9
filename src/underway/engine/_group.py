"""Group commit: the appends of a worker's concurrent activations share one transaction.

Every activation of an engine hands its commit (a step's end, the write-ahead intent of a
mutating call, a model's answer) to the engine's :class:`GroupCommit`. When no commit is
being written, a batch is written at once, alone: a lone step waits for nothing. While one
is being written, the batches that arrive wait, and the moment it returns they go to the
store together in one :meth:`~underway.store.journal.JournalStore.append_many` — one
transaction, one flush to disk. Under load groups form by themselves, with no timer.

Nothing about durability changes: an activation's commit returns only once the
transaction holding its batch has committed, each batch is fenced (lease token and
sequence) on its own, and a batch the store refuses is refused alone — the others of its
group commit.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field

from .. import faults
from ..store._offload import run_io
from ..store.base import AppendBatch, CoreStore

GROUP_LIMIT = 256
"""The most batches one transaction writes (more wait for the next)."""


@dataclass
class _Line:
    """The batches waiting on one event loop, and whether a group is being written."""

    waiting: list[tuple[AppendBatch, asyncio.Future[bool]]] = field(default_factory=list)
    writing: list[tuple[AppendBatch, asyncio.Future[bool]]] = field(default_factory=list)
    busy: bool = False


class GroupCommit:
    """Writes the batches that concurrent activations commit together (see the module's
    documentation). One per engine; it serves every event loop the engine runs on.

    ``groups`` and ``batches`` count what it wrote: ``batches / groups`` is the mean
    group size.
    """

    def __init__(self, store: CoreStore, *, limit: int = GROUP_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"a group holds at least one batch, not {limit}")
        self.store = store
        self.limit = limit
        self.groups = 0
        """Transactions written."""
        self.batches = 0
        """Batches written in them."""
        self._lines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Line] = (
            weakref.WeakKeyDictionary()
        )
        self._drains: set[asyncio.Task[None]] = set()

    async def append(self, batch: AppendBatch) -> bool:
        """Commit ``batch`` (with whatever else is waiting); return what
        :meth:`~underway.store.journal.JournalStore.append` returns, or raise what it
        raises, once the batch is durable or refused."""
        loop = asyncio.get_running_loop()
        line = self._lines.get(loop)
        if line is None:
            line = self._lines[loop] = _Line()
        done: asyncio.Future[bool] = loop.create_future()
        line.waiting.append((batch, done))
        if not line.busy:
            line.busy = True
            # Written by a task of its own, so that cancelling one activation never
            # leaves the others of its group without their answers.
            drain = loop.create_task(self._drain(line))
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)
        return await done

    async def _drain(self, line: _Line) -> None:
        try:
            while line.waiting:
                taken, line.waiting = line.waiting[:self.limit], line.waiting[self.limit:]
                # A waiter cancelled before its group was written: its batch is not written
                # (as a store call cancelled before it started is never made).
                line.writing = [(b, f) for b, f in taken if not f.done()]
                if line.writing:
                    await self._write(line.writing)
                line.writing = []
        finally:
            # Anything left means this task itself was cancelled (its loop is closing):
            # nobody will write those batches, so their waiters must not wait.
            for _, done in line.writing + line.waiting:
                done.cancel()
            line.busy, line.writing, line.waiting = False, [], []

    async def _write(self, group: list[tuple[AppendBatch, asyncio.Future[bool]]]) -> None:
        faults.point("group.before_commit")
        try:
            results = await run_io(self.store, self.store.append_many, [b for b, _ in group])
        except Exception as exc:
            for _, done in group:
                if not done.done():
                    done.set_exception(exc)
            return
        faults.point("group.after_commit")
        self.groups += 1
        self.batches += len(group)
        for (_, done), result in zip(group, results, strict=True):
            if done.done():
                continue
            if isinstance(result, Exception):
                done.set_exception(result)
            else:
                done.set_result(result)
