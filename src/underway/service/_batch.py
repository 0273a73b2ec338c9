"""Group commit for the server's own durable writes: the access-log entries of concurrent
reads, and concurrent signals, each group in one transaction.

A read of run data answers only once its access-log entry is durable, and a signal only
once it is in the run's inbox: each a commit, and on one database a flush to disk. When
no write is in progress, an item is written at once, alone; while one is, the items that
arrive wait, and the moment it returns they go to the store together, in one
transaction. Under load groups form by themselves, with no timer. The queue is the one
the engine's :mod:`~underway.engine._group` uses for steps
(:mod:`underway.store._grouped`): an item whose request went away before its group was
written is not written (its answer was never sent).

Nothing about durability changes: each request is answered only after the transaction
holding its item has committed. A group the store refuses as a whole is written again
one item at a time, each in its own transaction, so one item's refusal is its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..store._grouped import Grouped
from ..store._offload import run_io
from ..store.base import AccessRecord, SignalRecord, Store

GROUP_LIMIT = 256
"""The most items one transaction writes (more wait for the next)."""

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class Batcher(Grouped[_Item, _Result]):
    """Writes the items concurrent requests submit together (see the module).

    Args:
        store: What ``write`` reaches (its calls run on the store's threads).
        write: Writes items in one transaction; returns one result per item, in order.
        limit: The most items one transaction writes.
    """

    def __init__(self, store: object,
                 write: Callable[[Sequence[_Item]], Sequence[_Result]], *,
                 limit: int = GROUP_LIMIT) -> None:
        super().__init__(limit)
        self.store = store
        self.write = write
        self.groups = 0
        """Transactions written."""
        self.items = 0
        """Items written in them."""

    async def submit(self, item: _Item) -> _Result:
        """Write ``item`` (with whatever else is waiting); its result once durable, or
        what writing it raised."""
        return await self._submit(item)

    async def _write(self, group: list[tuple[_Item, asyncio.Future[Any]]]) -> None:
        items = [item for item, _ in group]
        outcomes = await run_io(self.store, self._written, items)
        self.groups += 1
        self.items += len(items)
        for (_, done), (ok, value) in zip(group, outcomes, strict=True):
            if done.done():
                continue
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)

    def _written(self, items: list[_Item]) -> list[tuple[bool, Any]]:
        """Each item's ``(True, result)`` or ``(False, exception)``: the group in one
        transaction, or, refused as a whole, each alone."""
        try:
            return [(True, r) for r in self.write(items)]
        except Exception as exc:
            if len(items) == 1:
                return [(False, exc)]
        outcomes: list[tuple[bool, Any]] = []
        for item in items:
            try:
                outcomes.append((True, self.write([item])[0]))
            except Exception as exc:
                outcomes.append((False, exc))
        return outcomes


class Writes:
    """The server's grouped writes on ``store``: access-log entries, and signals where the
    store writes many in one transaction (``send_signals``; elsewhere each signal is
    written by the request that sends it, as concurrent transactions)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.access: Batcher[list[AccessRecord], list[AccessRecord]] = Batcher(
            store, self._log_access)
        many = _grouped_signals(store)
        self.signals: Batcher[SignalRecord, bool] | None = (
            None if many is None else Batcher(store, many))

    async def log_access(self, records: list[AccessRecord]) -> None:
        """Append ``records`` to the access log; return once they are durable."""
        if records:
            await self.access.submit(records)

    async def send_signal(self, record: SignalRecord) -> bool:
        """Put the signal in its run's inbox (False: a duplicate); return once durable."""
        if self.signals is None:
            return await run_io(self.store, self.store.send_signal, record)
        return await self.signals.submit(record)

    def _log_access(self, groups: Sequence[list[AccessRecord]]) -> list[list[AccessRecord]]:
        stored = self.store.log_access([r for group in groups for r in group])
        split, at = [], 0
        for group in groups:
            split.append(stored[at:at + len(group)])
            at += len(group)
        return split


def _grouped_signals(store: Store) -> Callable[[Sequence[SignalRecord]], list[bool]] | None:
    """The store's ``send_signals``, when the class that defines it also defines the
    ``send_signal`` in force (a wrapper that changes how one signal is sent gets no
    group: each of its signals is sent as it sends one)."""
    many = getattr(store, "send_signals", None)
    if many is None:
        return None
    owners = [next((k for k in type(store).__mro__ if name in vars(k)), None)
              for name in ("send_signal", "send_signals")]
    return many if owners[0] is owners[1] else None
