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
from typing import Any

from .. import faults
from ..store._grouped import Grouped
from ..store._offload import run_io
from ..store.base import AppendBatch, CoreStore

GROUP_LIMIT = 256
"""The most batches one transaction writes (more wait for the next)."""


class GroupCommit(Grouped[AppendBatch, bool]):
    """Writes the batches that concurrent activations commit together (see the module's
    documentation). One per engine; it serves every event loop the engine runs on.

    ``groups`` and ``batches`` count what it wrote: ``batches / groups`` is the mean
    group size.
    """

    def __init__(self, store: CoreStore, *, limit: int = GROUP_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"a group holds at least one batch, not {limit}")
        super().__init__(limit)
        self.store = store
        self.groups = 0
        """Transactions written."""
        self.batches = 0
        """Batches written in them."""

    async def append(self, batch: AppendBatch) -> bool:
        """Commit ``batch`` (with whatever else is waiting); return what
        :meth:`~underway.store.journal.JournalStore.append` returns, or raise what it
        raises, once the batch is durable or refused."""
        return await self._submit(batch)

    async def _write(self, group: list[tuple[AppendBatch, asyncio.Future[Any]]]) -> None:
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
