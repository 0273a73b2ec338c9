"""Reads that need only committed data, kept off the writer's connection.

A SQLite store has one connection for its writes, serialised by a lock: a read on it waits
while a commit flushes to disk. Code that only reads what is committed (the API's ``GET``
requests) runs inside :func:`committed_reads`. There, a store that keeps read-only
connections (SQLite in WAL mode: readers never wait for the writer) reads on one of them.
Each read starts a fresh read transaction, so it sees every transaction committed before
it began, by this process or another: a client that was answered after a write reads it.

The mark is a context variable: :func:`~underway.store._offload.run_io` and the thread
pool of a synchronous endpoint carry it to the thread that makes the call. A write
transaction clears it for its block, so a read made inside one (which must see the
transaction's own rows) stays on the writer's connection. Stores without read-only
connections (PostgreSQL's pool, the in-memory store) ignore it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_COMMITTED: ContextVar[bool] = ContextVar("underway_committed_reads", default=False)


@contextmanager
def committed_reads(on: bool = True) -> Iterator[None]:
    """Within the block, reads may use a store's read-only connections (``on``), or must
    use the writer's (``on`` false: inside a write transaction)."""
    token = _COMMITTED.set(on)
    try:
        yield
    finally:
        _COMMITTED.reset(token)


def reads_committed() -> bool:
    """Whether the code running now asked for :func:`committed_reads`."""
    return _COMMITTED.get()
