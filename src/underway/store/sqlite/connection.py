"""The connection every part of :class:`~underway.store.sqlite.SQLiteStore` shares, its
transactions, and the schema's migrations."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...codec import Codec
from ...errors import MigrationError
from .. import queries
from .._offload import Offload

_Q = queries.load("sqlite")


IO_THREADS = 4
"""Threads that run a SQLite store's calls for async code: the connection serves one at a
time, and more than one lets a long read (a tenant's usage) interleave with commits."""


class Connection:
    """One SQLite connection, serialized by a lock; writes go through :meth:`_tx`.

    ``offload``: where async code runs this store's calls (:mod:`underway.store._offload`).
    """

    def __init__(self, path: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""
        self.offload = Offload(IO_THREADS, name="underway-sqlite")
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        self._conn.row_factory = sqlite3.Row
        # Event hashes are stored as bytes and passed as hex (SQLite has unhex() only from
        # 3.41 on; this one behaves alike).
        self._conn.create_function("unhex", 1, _unhex, deterministic=True)
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # Before anything that could write (even switching the journal mode): a database
        # migrated by a newer underway is refused untouched.
        try:
            found, known = self.schema_version(), queries.latest_version("sqlite")
        except BaseException:
            self._conn.close()
            raise
        if found > known:
            self._conn.close()
            raise MigrationError(queries.newer_schema_message(found, known))
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, name: str, *args: Any) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(_Q[name], args).fetchall()

    def _query_named(self, name: str, **params: Any) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(_Q[name], params).fetchall()

    # -- schema -------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The highest migration applied (0 before the first); reads only."""
        with self._lock:
            if not self._conn.execute(_Q["has_schema_version_table"]).fetchone()[0]:
                return 0
            return int(self._conn.execute(_Q["schema_version"]).fetchone()[0])

    def migrate(self) -> int:
        """Apply pending numbered migrations, each in its own transaction.

        Each transaction reads the version again under the write lock, so processes that
        migrate the same file at once take turns instead of applying a migration twice.
        """
        known = queries.latest_version("sqlite")
        current = self.schema_version()
        if current > known:
            raise MigrationError(queries.newer_schema_message(current, known))
        for version, name, sql in queries.migrations("sqlite"):
            if version <= current:
                continue
            try:
                with self._tx() as c:
                    c.execute(_Q["schema_version_table"])
                    current = int(c.execute(_Q["schema_version"]).fetchone()[0])
                    if version <= current:
                        continue
                    for statement in _statements(sql):
                        c.execute(statement)
                    c.execute(_Q["record_migration"], (version, name, time.time()))
            except sqlite3.Error as exc:
                raise MigrationError(f"migration {name} failed on {self.path}: {exc}") from exc
            current = version
        return current

    def close(self) -> None:
        """Close the connection (once the calls async code made on it have ended)."""
        self.offload.close()
        with self._lock:
            self._conn.close()

    # -- companion tables (underway.knowledge) ----------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The store's connection, held exclusively for the block. It is in autocommit
        mode: write with ``BEGIN IMMEDIATE`` ... ``COMMIT``. For tables kept in the same
        file beside the store's own, such as the knowledge base's."""
        with self._lock:
            yield self._conn


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements: SQLite itself says where each one ends, so a
    trigger's ``BEGIN ... END`` body (semicolons inside) stays one statement."""
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    found, current = [], ""
    for piece in body.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n;"):
                found.append(current.strip())
            current = ""
    if current.strip(" \n;"):
        found.append(current.strip())
    return found


def _unhex(text: object) -> bytes | None:
    """The bytes that the hex digits ``text`` spell; NULL for anything else."""
    if not isinstance(text, str):
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None
