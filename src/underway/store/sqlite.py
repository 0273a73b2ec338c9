"""SQLite store: the embedded default. WAL journal, ``synchronous=FULL``.

Writers serialize through ``BEGIN IMMEDIATE``, which is also what makes claiming correct
when several worker processes share one database file.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ConflictError, FencedError, MigrationError, RunNotFound
from . import queries
from .base import (
    AppendBatch,
    Lease,
    NewRun,
    RunRecord,
    SignalRecord,
    StoredEvent,
)

_Q = queries.load("sqlite")


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
        control_pending=bool(row["control_pending"]),
        lease_owner=row["lease_owner"],
        lease_token=row["lease_token"],
        lease_expires_at=row["lease_expires_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        error=row["error"],
        queue=row["queue"],
    )


class SQLiteStore:
    """A :class:`~underway.store.base.Store` on one SQLite database file."""

    dialect = "sqlite"

    def __init__(self, path: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")

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

    # -- schema -------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The highest migration applied."""
        with self._tx() as c:
            c.execute(_Q["schema_version_table"])
            return int(c.execute(_Q["schema_version"]).fetchone()[0])

    def migrate(self) -> int:
        """Apply pending numbered migrations, each in its own transaction."""
        current = self.schema_version()
        for version, name, sql in queries.migrations("sqlite"):
            if version <= current:
                continue
            try:
                with self._tx() as c:
                    for statement in _statements(sql):
                        c.execute(statement)
                    c.execute(_Q["record_migration"], (version, name, time.time()))
            except sqlite3.Error as exc:
                raise MigrationError(f"migration {name} failed on {self.path}: {exc}") from exc
            current = version
        return current

    # -- runs ---------------------------------------------------------------------------
    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the one with the same key."""
        with self._tx() as c:
            if new.idempotency_key is not None:
                row = c.execute(
                    _Q["find_by_idempotency"], (new.tenant_id, new.flow, new.idempotency_key)
                ).fetchone()
                if row is not None:
                    return _run(row), False
            ev = new.first_event
            cur = c.execute(
                _Q["insert_run"],
                (
                    new.tenant_id, new.run_id, new.flow, new.step, new.idempotency_key,
                    ev.seq, ev.hash, new.next_wake_at, new.now, new.now, new.queue,
                ),
            )
            if cur.rowcount == 0:
                raise ConflictError(f"run {new.run_id} already exists in tenant {new.tenant_id}")
            c.execute(
                _Q["insert_event"],
                (new.tenant_id, new.run_id, ev.seq, ev.type, ev.payload, ev.hash),
            )
            c.executemany(
                _Q["insert_blob"], [(new.tenant_id, k, v) for k, v in new.blobs.items()]
            )
            row = c.execute(_Q["get_run"], (new.tenant_id, new.run_id)).fetchone()
            return _run(row), True

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically, fenced by lease token and expected sequence."""
        if not batch.events:
            return False
        last = batch.events[-1]
        u = batch.update
        t, r = batch.tenant_id, batch.run_id
        with self._tx() as c:
            # BEGIN IMMEDIATE holds the write lock: reading the fence is as good as writing it.
            row = c.execute(_Q["get_run"], (t, r)).fetchone()
            last_seq = c.execute(_Q["last_seq"], (t, r)).fetchone()[0]
            _check_fence(row, last_seq, batch)
            control_pending = bool(row["control_pending"])
            c.executemany(
                _Q["insert_event"], [(t, r, e.seq, e.type, e.payload, e.hash) for e in batch.events]
            )
            if u is not None:
                c.execute(
                    _Q["advance_run"],
                    (
                        last.seq, last.hash, u.status, u.step, u.next_wake_at, u.waiting_signal,
                        u.error, batch.now, t, r,
                    ),
                )
            if batch.blobs:
                c.executemany(_Q["insert_blob"], [(t, k, v) for k, v in batch.blobs.items()])
            if batch.checkpoint is not None:
                c.execute(_Q["upsert_checkpoint"], (t, r, *batch.checkpoint))
            for signal_id in batch.consumed_signals:
                c.execute(_Q["consume_signal"], (t, r, signal_id))
            if batch.consumed_signals and control_pending:
                c.execute(_Q["refresh_control_pending"], (t, r))
                row = c.execute(_Q["get_run"], (t, r)).fetchone()
                control_pending = bool(row["control_pending"])
            if (u is not None and u.waiting_signal is not None) or (
                batch.release and control_pending
            ):
                # A signal that arrived while the step ran must not wait for the timer.
                c.execute(_Q["wake_if_signal_pending"], (batch.now, t, r))
            if batch.release:
                c.execute(_Q["release_after_append"], (t, r))
        return control_pending

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events after ``after_seq``."""
        rows = self._query("load_events", tenant_id, run_id, after_seq)
        return [StoredEvent(r[0], r[1], bytes(r[2]), r[3]) for r in rows]

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The latest checkpoint."""
        rows = self._query("load_checkpoint", tenant_id, run_id)
        return (rows[0][0], bytes(rows[0][1])) if rows else None

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints of a run or a whole tenant."""
        with self._tx() as c:
            if run_id is None:
                return c.execute(_Q["delete_checkpoints_of_tenant"], (tenant_id,)).rowcount
            return c.execute(_Q["delete_checkpoints_of_run"], (tenant_id, run_id)).rowcount

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row."""
        rows = self._query("get_run", tenant_id, run_id)
        return _run(rows[0]) if rows else None

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first."""
        if status is None:
            rows = self._query("list_runs", tenant_id, limit)
        else:
            rows = self._query("list_runs_by_status", tenant_id, status, limit)
        return [_run(r) for r in rows]

    def tenants(self) -> list[str]:
        """Tenants with runs."""
        return [r[0] for r in self._query("tenants")]

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        if tenant_id is None:
            rows = self._query("journaled_runs")
        else:
            rows = self._query("journaled_runs_of_tenant", tenant_id, tenant_id)
        return [(r[0], r[1]) for r in rows]

    # -- leases -------------------------------------------------------------------------
    def claim(
        self,
        *,
        owner: str,
        now: float,
        ttl: float,
        limit: int = 1,
        tenant_id: str | None = None,
        run_id: str | None = None,
    ) -> list[Lease]:
        """Lease due runs nobody holds."""
        with self._tx() as c:
            if run_id is not None:
                rows = c.execute(_Q["due_run"], (tenant_id, run_id, now, now, limit)).fetchall()
            elif tenant_id is not None:
                rows = c.execute(_Q["due_runs_of_tenant"], (tenant_id, now, now, limit)).fetchall()
            else:
                rows = c.execute(_Q["due_runs"], (now, now, limit)).fetchall()
            leases = []
            for t, r in rows:
                token = c.execute(_Q["take_lease"], (owner, now + ttl, t, r)).fetchone()[0]
                leases.append(Lease(t, r, owner, int(token), now + ttl))
            return leases

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a held lease."""
        with self._tx() as c:
            cur = c.execute(
                _Q["renew_lease"],
                (now + ttl, lease.tenant_id, lease.run_id, lease.owner, lease.token),
            )
            if cur.rowcount != 1:
                return None
        return Lease(lease.tenant_id, lease.run_id, lease.owner, lease.token, now + ttl)

    def release(self, lease: Lease) -> None:
        """Give a lease back."""
        with self._tx() as c:
            c.execute(
                _Q["release_lease"], (lease.tenant_id, lease.run_id, lease.owner, lease.token)
            )

    def held_leases(self, *, now: float) -> list[tuple[str, str, str]]:
        """Unexpired leases."""
        return [(r[0], r[1], r[2]) for r in self._query("held_leases", now)]

    def expire_lease(self, tenant_id: str, run_id: str, owner: str) -> int:
        """End a dead owner's lease."""
        with self._tx() as c:
            return c.execute(_Q["expire_lease"], (tenant_id, run_id, owner)).rowcount

    def next_wake_at(self) -> float | None:
        """Earliest due time of unfinished runs."""
        value = self._query("next_wake_at")[0][0]
        return None if value is None else float(value)

    # -- signals and blobs --------------------------------------------------------------
    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        s = signal
        with self._tx() as c:
            cur = c.execute(
                _Q["insert_signal"],
                (s.tenant_id, s.run_id, s.signal_id, s.name, s.payload, s.sender, s.created_at),
            )
            if cur.rowcount == 0:
                return False
            c.execute(
                _Q["wake_for_signal"],
                (s.created_at, s.name, s.tenant_id, s.run_id, s.name, s.name),
            )
            return True

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._query("pending_signals", tenant_id, run_id)
        ]

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key."""
        found: dict[str, bytes] = {}
        with self._lock:
            for key in keys:
                row = self._conn.execute(_Q["get_blob"], (tenant_id, key)).fetchone()
                if row is not None:
                    found[row[0]] = bytes(row[1])
        return found

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements (no semicolons inside our DDL literals)."""
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def _check_fence(row: sqlite3.Row | None, last_seq: int, batch: AppendBatch) -> None:
    if row is None:
        raise RunNotFound(batch.tenant_id, batch.run_id)
    if row["lease_token"] != batch.fence or row["lease_owner"] is None:
        raise FencedError(
            f"run {batch.run_id}: lease token {batch.fence} is stale "
            f"(current {row['lease_token']}); another worker owns this run"
        )
    if last_seq != batch.expected_seq:
        raise ConflictError(
            f"run {batch.run_id}: expected last seq {batch.expected_seq}, found {last_seq}"
        )
