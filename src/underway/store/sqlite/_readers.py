"""Read-only connections to a SQLite store's file, for reads of committed data
(:mod:`underway.store._reading`): in WAL mode a reader never waits for the writer."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ...errors import StoreError

KEEP = 8
"""Idle read-only connections kept open (more are opened when needed, and closed after)."""


class Readers:
    """A pool of read-only connections (``PRAGMA query_only``), each used by one thread
    at a time.

    Args:
        connect: Opens a connection to the store's file, set up as the writer's is.
        keep: The most idle connections kept.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, keep: int = KEEP) -> None:
        self._connect = connect
        self._keep = keep
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection of the pool for the block (``snapshot``: in one read transaction,
        so every read of the block sees the same committed state)."""
        with self._lock:
            if self._closed:
                raise StoreError("the SQLite store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=1")
        try:
            if snapshot:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            else:
                yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            with self._lock:
                if not self._closed and len(self._idle) < self._keep:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def close(self) -> None:
        """Close the idle connections; those in use close when handed back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
