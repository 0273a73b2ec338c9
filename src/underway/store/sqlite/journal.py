"""The journal and run index of :class:`~underway.store.sqlite.SQLiteStore`: events,
checkpoints, blobs and the runs table."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence

from ... import faults
from ...errors import ConflictError, FencedError, RunNotFound
from ..journal import BLOB_BATCH, CHAIN_LIMIT, RUN_BATCH, AppendResult
from ..records import AppendBatch, CheckpointTail, ForkLink, NewRun, RunRecord, StoredEvent
from .connection import _Q, Connection
from .inbox import _send_signal


class Journal(Connection):
    """:class:`~underway.store.journal.JournalStore` and
    :class:`~underway.store.runs.RunStore` on SQLite."""

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the one with the same key."""
        with self._tx() as c:
            return _create_run(c, new)

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically, fenced by lease token and expected sequence."""
        if not batch.events:
            return False
        with self._tx() as c:
            return _append(c, batch)

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append several runs' batches in one transaction (one fsync), each inside its
        own savepoint: a batch refused or failing is rolled back alone."""
        out: list[AppendResult] = []
        with self._tx() as c:
            for batch in batches:
                if not batch.events:
                    out.append(False)
                    continue
                c.execute("SAVEPOINT batch")
                try:
                    out.append(_append(c, batch))
                except Exception as exc:
                    c.execute("ROLLBACK TO batch")
                    out.append(exc)
                c.execute("RELEASE batch")
            faults.point("group.uncommitted")
        return out

    def fork_run(self, new: NewRun, link: ForkLink) -> RunRecord:
        """Create the fork and append the parent's event in one transaction."""
        t, r, e = link.tenant_id, link.run_id, link.event
        with self._tx() as c:
            parent = c.execute(_Q["fork_parent"], (t, r)).fetchone()
            if parent is None:
                raise RunNotFound(t, r)
            if parent["lease_owner"] is not None and (
                    parent["lease_expires_at"] or 0) >= link.now:
                raise ConflictError(
                    f"run {r} is being advanced by {parent['lease_owner']}; fork it once "
                    "that worker has handed it back")
            if parent["last_seq"] != link.expected_seq:
                raise ConflictError(
                    f"run {r}: expected last seq {link.expected_seq}, found "
                    f"{parent['last_seq']}")
            # A fork is never found by an idempotency key: it is always a new run.
            forked, _ = _create_run(c, dataclasses.replace(new, idempotency_key=None))
            c.execute(_Q["insert_event"], (t, r, e.seq, e.type, e.payload, e.hash))
            c.execute(_Q["advance_head"], (e.seq, e.hash, link.now, t, r))
            return forked

    def load_checkpoints(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, CheckpointTail]:
        """Checkpoints with their tails, :data:`~underway.store.journal.RUN_BATCH` runs a
        query."""
        found: dict[str, CheckpointTail] = {}
        for i in range(0, len(run_ids), RUN_BATCH):
            rows = self._query_named("checkpoints_with_tails", tenant_id=tenant_id,
                                     runs=json.dumps(list(run_ids[i:i + RUN_BATCH])))
            for row in rows:
                run_id = row[0]
                if run_id not in found:
                    found[run_id] = CheckpointTail(int(row[1]), _bytes(row[2]), [])
                found[run_id].tail.append(StoredEvent(row[3], row[4], _bytes(row[5]), row[6]))
        return found

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events after ``after_seq``."""
        rows = self._query("load_events", tenant_id, run_id, after_seq)
        return [StoredEvent(r[0], r[1], _bytes(r[2]), r[3]) for r in rows]

    def events_by_type(
        self, tenant_id: str, run_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[StoredEvent]]:
        """Events of some types of many runs, :data:`~underway.store.journal.RUN_BATCH`
        runs a query."""
        found: dict[str, list[StoredEvent]] = {}
        kinds = json.dumps(list(types))
        for i in range(0, len(run_ids), RUN_BATCH):
            rows = self._query_named("events_by_type", tenant_id=tenant_id, types=kinds,
                                     runs=json.dumps(list(run_ids[i:i + RUN_BATCH])))
            for r in rows:
                found.setdefault(r[0], []).append(StoredEvent(r[1], r[2], _bytes(r[3]), r[4]))
        return found

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

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key, :data:`~underway.store.journal.BLOB_BATCH` keys a query."""
        found: dict[str, bytes] = {}
        with self._lock:
            for i in range(0, len(keys), BLOB_BATCH):
                chunk = json.dumps(keys[i:i + BLOB_BATCH])
                for row in self._conn.execute(_Q["get_blobs"], (tenant_id, chunk)):
                    found[row[0]] = bytes(row[1])
        return found

    def get_blob_chain(
        self, tenant_id: str, key: str, *, limit: int = CHAIN_LIMIT
    ) -> dict[str, bytes]:
        """The blob and the blobs it links to, in one recursive query."""
        rows = self._query_named(
            "get_blob_chain", tenant_id=tenant_id, key=key, limit=limit
        )
        return {row[0]: bytes(row[1]) for row in rows}

    # -- the run index ------------------------------------------------------------------
    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row."""
        rows = self._query("get_run", tenant_id, run_id)
        return _run(rows[0]) if rows else None

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
        updated_since: float | None = None, updated_until: float | None = None,
        search: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, filtered and paged."""
        params = {
            "tenant_id": tenant_id, "status": status, "flow": flow, "since": since,
            "until": until, "after_at": after[0] if after else None,
            "after_id": after[1] if after else None, "prefix": id_prefix, "limit": limit,
            "updated_since": updated_since, "updated_until": updated_until, "search": search,
        }
        with self._lock:
            rows = self._conn.execute(_Q["list_runs"], params).fetchall()
        return [_run(r) for r in rows]

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about a subject, oldest first."""
        rows = self._query_named("runs_of_subject", tenant_id=tenant_id, subject=subject,
                                 limit=limit)
        return [_run(r) for r in rows]

    def tenants(self) -> list[str]:
        """Tenants with runs."""
        return [r[0] for r in self._query("tenants")]

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, count) of the runs."""
        return [(r[0], r[1], int(r[2])) for r in self._query("run_counts")]

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, status, count) of the runs created in a window."""
        rows = self._query_named("runs_created", tenant_id=tenant_id, since=since,
                                 until=until, width=width)
        return [(int(r[0]), r[1], int(r[2])) for r in rows]

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Runs whose journals may hold events of a window."""
        rows = self._query_named("runs_written", tenant_id=tenant_id, since=since, until=until)
        return [r[0] for r in rows]

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        if tenant_id is None:
            rows = self._query("journaled_runs")
        else:
            rows = self._query("journaled_runs_of_tenant", tenant_id, tenant_id)
        return [(r[0], r[1]) for r in rows]

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        if tenant_id is None:
            rows = self._query("journal_heads")
        else:
            rows = self._query("journal_heads_of_tenant", tenant_id)
        return [(r[0], r[1], r[2], r[3]) for r in rows]


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
        subject=row["subject"],
        purpose=row["purpose"],
    )

def _create_run(c: sqlite3.Connection, new: NewRun) -> tuple[RunRecord, bool]:
    """Create the run in the open transaction, or find the one with its idempotency key."""
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
            ev.seq, ev.hash, new.next_wake_at, new.now, new.now, new.queue, new.subject,
            new.purpose,
        ),
    )
    if cur.rowcount == 0:
        raise ConflictError(f"run {new.run_id} already exists in tenant {new.tenant_id}")
    c.execute(
        _Q["insert_event"],
        (new.tenant_id, new.run_id, ev.seq, ev.type, ev.payload, ev.hash),
    )
    c.executemany(_Q["insert_blob"], [(new.tenant_id, k, v) for k, v in new.blobs.items()])
    row = c.execute(_Q["get_run"], (new.tenant_id, new.run_id)).fetchone()
    return _run(row), True

def _append(c: sqlite3.Connection, batch: AppendBatch) -> bool:
    """Write one batch inside the caller's transaction (which holds the write lock, so
    reading the fence is as good as writing it); return whether control signals wait."""
    last = batch.events[-1]
    u = batch.update
    t, r = batch.tenant_id, batch.run_id
    row = c.execute(_Q["fence"], (t, r)).fetchone()
    _check_fence(row, batch)
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
    for signal in batch.signals:
        _send_signal(c, signal)
    return control_pending


def _check_fence(row: sqlite3.Row | None, batch: AppendBatch) -> None:
    if row is None:
        raise RunNotFound(batch.tenant_id, batch.run_id)
    if row["lease_token"] != batch.fence or row["lease_owner"] is None:
        raise FencedError(
            f"run {batch.run_id}: lease token {batch.fence} is stale "
            f"(current {row['lease_token']}); another worker owns this run"
        )
    if row["last_seq"] != batch.expected_seq:
        raise ConflictError(
            f"run {batch.run_id}: expected last seq {batch.expected_seq}, "
            f"found {row['last_seq']}"
        )

def _bytes(value: object) -> bytes:
    """A BLOB column's value as bytes: SQLite keeps whatever type was written, and text
    written by hand must reach the audit as bytes rather than fail to load."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")
