"""The connection every part of :class:`~underway.store.sqlite.SQLiteStore` shares, its
transactions, and the schema's migrations."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ...codec import Codec
from ...errors import MigrationError
from .. import queries
from .._offload import Offload
from .._reading import committed_reads, reads_committed
from .._sqlbase.dialect import Read, Run, SQLBase
from ..records import RunRecord
from ._readers import Readers

_Q = queries.load("sqlite")


IO_THREADS = 4
"""Threads that run a SQLite store's calls for async code: the connection serves one at a
time, and more than one lets a long read (a tenant's usage) interleave with commits."""


class Connection(SQLBase):
    """One SQLite connection, serialized by a lock; writes go through :meth:`_tx`
    (``BEGIN IMMEDIATE``: the write lock is taken before anything is read). Reads made
    within :func:`~underway.store._reading.committed_reads` use read-only connections of
    their own (``readers``; a file in WAL mode only), so they never wait for a commit.

    ``offload``: where async code runs this store's calls (:mod:`underway.store._offload`).
    """

    def __init__(self, path: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""
        self.offload = Offload(IO_THREADS, name="underway-sqlite")
        self._lock = threading.RLock()
        self._busy_timeout_ms = busy_timeout_ms
        self._conn = self._connect()
        # Before anything that could write (even switching the journal mode): a database
        # migrated by a newer underway is refused untouched.
        self._refuse_newer_schema("sqlite", self._conn.close)
        mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        self._conn.execute("PRAGMA synchronous=FULL")
        self._autocheckpoint = int(self._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        """The pages the log may hold before a commit of this connection checkpoints it."""
        self._checkpointer: sqlite3.Connection | None = None
        """The connection that checkpoints the log while chunks are written (opened then)."""
        self._checkpointing = threading.Lock()
        self._chunk_writers = 0
        """Chunked blobs being written (the connection does not checkpoint meanwhile)."""
        self._unchecked = 0
        """Chunk bytes written since the log was last checkpointed."""
        self.readers: Readers | None = Readers(self._connect) if mode == "wal" else None
        """Read-only connections for reads of committed data (None: a database in
        memory, which another connection would not see)."""

    def _connect(self) -> sqlite3.Connection:
        """A connection to the file, set up for the store's queries."""
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=self._busy_timeout_ms / 1000)
        conn.row_factory = sqlite3.Row
        # Event hashes are stored as bytes and passed as hex (SQLite has unhex() only from
        # 3.41 on; this one behaves alike).
        conn.create_function("unhex", 1, _unhex, deterministic=True)
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        # A read within the transaction must see its rows: on this connection.
        with self._lock, committed_reads(False):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- the dialect of the shared SQL bodies (store/_sqlbase) ---------------------------
    def _all(self, name: str, /, **params: Any) -> list[sqlite3.Row]:
        if self.readers is not None and reads_committed():
            with self.readers.connection() as conn:
                return conn.execute(_Q[name], params).fetchall()
        with self._lock:
            return self._conn.execute(_Q[name], params).fetchall()

    def _count(self, name: str, /, **params: Any) -> int:
        with self._tx() as c:
            return c.execute(_Q[name], params).rowcount

    def _written(self, name: str, /, **params: Any) -> list[sqlite3.Row]:
        with self._tx() as c:
            return c.execute(_Q[name], params).fetchall()

    @contextmanager
    def _reads(self) -> Iterator[Read]:
        if self.readers is not None and reads_committed():
            with self.readers.connection(snapshot=True) as conn:
                yield lambda name, /, **params: conn.execute(_Q[name], params).fetchall()
            return
        with self._lock:
            yield lambda name, /, **params: self._conn.execute(_Q[name], params).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[Run]:
        with self._tx() as c:
            yield _runner(c)

    @staticmethod
    def _array(values: Iterable[Any]) -> str:
        return json.dumps(list(values))

    @staticmethod
    def _from_array(value: Any) -> list[Any]:
        return list(json.loads(value))

    @staticmethod
    def _blob(value: Any) -> bytes:
        return _bytes(value)

    @staticmethod
    def _run(row: Any) -> RunRecord:
        return _run(row)

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
        if (current := self._up_to_date("sqlite")) is not None:
            return current  # nothing to migrate: no migration file is read
        current = self.schema_version()
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
        if self.readers is not None:
            self.readers.close()
        with self._lock:
            self._conn.close()
        with self._checkpointing:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None

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


def _run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        tenant_id=row["tenant_id"],
        run_id=row["run_id"],
        flow=row["flow"],
        status=row["status"],
        step=row["step"],
        idempotency_key=row["idempotency_key"],
        last_seq=row["last_seq"],
        last_hash=row["last_hash"],
        next_wake_at=row["next_wake_at"],
        waiting_signal=row["waiting_signal"],
        request_kind=row["request_kind"],
        control_pending=bool(row["control_pending"]),
        lease_owner=row["lease_owner"],
        lease_token=row["lease_token"],
        lease_expires_at=row["lease_expires_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        error=row["error"],
        queue=row["queue"],
        subject=row["subject"],
        purpose=row["purpose"],
    )


def _bytes(value: object) -> bytes:
    """A BLOB column's value as bytes: SQLite keeps whatever type was written, and text
    written by hand must reach the audit as bytes rather than fail to load."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")


def _runner(c: sqlite3.Connection) -> Run:
    """Runs named queries on ``c`` (in the transaction open on it)."""
    return lambda name, /, **params: c.execute(_Q[name], params)
