"""The journal and run index of :class:`~underway.store.sqlite.SQLiteStore`: events,
checkpoints, blobs and the runs table."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ... import faults
from ...errors import ConflictError, FencedError, RunNotFound
from .._sqlbase.journal import SQLJournal
from ..journal import AppendResult
from ..records import AppendBatch, ForkLink, NewRun, RunRecord, StoredLabel
from ._connection import _Q, Connection, _run
from ._inbox import _send_signal

CHECKPOINT_BYTES = 4 << 20
"""Chunk bytes written between two checkpoints of the log (about SQLite's own 1,000
pages)."""


class Journal(SQLJournal, Connection):
    """:class:`~underway.store.journal.JournalStore` and
    :class:`~underway.store.runs.RunStore` on SQLite: writes under ``BEGIN IMMEDIATE``,
    each batch of a group in its own savepoint."""

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the one with the same key."""
        self._write_large(new.tenant_id, new.blobs)
        with self._tx() as c:
            return _create_run(c, new)

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically, fenced by lease token and expected sequence."""
        if not batch.events:
            return False
        self._write_large(batch.tenant_id, batch.blobs)
        with self._tx() as c:
            return _append(c, batch)

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append several runs' batches in one transaction (one fsync), each inside its
        own savepoint: a batch refused or failing is rolled back alone."""
        out: list[AppendResult] = []
        for batch in batches:
            self._write_large(batch.tenant_id, batch.blobs)
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
        self._write_large(new.tenant_id, new.blobs)
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

    def write_blob_chunks(self, tenant_id: str, key: str, chunks: Iterable[bytes]) -> None:
        """Write a chunked blob's chunks, each in a transaction of its own, so that other
        writers' commits go between them.

        Meanwhile the store's connection does not checkpoint the log: a connection of the
        chunks' own does, outside the store's lock, every :data:`CHECKPOINT_BYTES` and at
        the end. So no other run's commit waits while the chunks are copied from the log
        into the database file.
        """
        self._chunk_writing(1)
        try:
            super().write_blob_chunks(tenant_id, key, chunks)
        finally:
            self._chunk_writing(-1)
            self._checkpoint()

    def _chunk_writing(self, delta: int) -> None:
        """Count a chunked blob's writing in (1) or out (-1): while any is written, the
        store's connection does not checkpoint on commit."""
        with self._lock:
            before, self._chunk_writers = self._chunk_writers, self._chunk_writers + delta
            if not before or not self._chunk_writers:
                pages = 0 if self._chunk_writers else self._autocheckpoint
                self._conn.execute(f"PRAGMA wal_autocheckpoint={pages}")

    def _put_chunk(self, params: dict[str, Any]) -> None:
        """A chunk's transaction, with ``synchronous=NORMAL``: in WAL mode its commit does
        not sync the log; the next ``FULL`` commit (the event's) syncs it."""
        with self._lock:
            self._conn.execute("PRAGMA synchronous=NORMAL")
            try:
                with self._tx() as c:
                    c.execute(_Q["put_blob_chunk"], params)
            finally:
                self._conn.execute("PRAGMA synchronous=FULL")
            self._unchecked += len(params["data"])
            due = self._unchecked >= CHECKPOINT_BYTES
        if due:
            self._checkpoint()

    def _checkpoint(self) -> None:
        """Checkpoint the log (``PASSIVE``: it waits for no writer and no reader) on the
        chunks' own connection, outside the store's lock. A checkpoint that cannot be made
        now is left to the next one."""
        with self._checkpointing:
            if self._checkpointer is None:
                self._checkpointer = self._connect()
            with self._lock:
                self._unchecked = 0
            with contextlib.suppress(sqlite3.OperationalError):
                self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        if tenant_id is None:
            rows = self._all("journaled_runs")
        else:
            rows = self._all("journaled_runs_of_tenant", tenant_id=tenant_id)
        return [(r[0], r[1]) for r in rows]

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        if tenant_id is None:
            rows = self._all("journal_heads")
        else:
            rows = self._all("journal_heads_of_tenant", tenant_id=tenant_id)
        return [(r[0], r[1], r[2], r[3]) for r in rows]


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
    _put_labels(c, new.tenant_id, new.run_id, new.labels)
    row = c.execute(
        _Q["get_run"], {"tenant_id": new.tenant_id, "run_id": new.run_id}).fetchone()
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
                u.error, u.request_kind, batch.now, t, r,
            ),
        )
    if batch.blobs:
        c.executemany(_Q["insert_blob"], [(t, k, v) for k, v in batch.blobs.items()])
    _put_labels(c, t, r, batch.labels)
    if batch.checkpoint is not None:
        c.execute(_Q["upsert_checkpoint"], (t, r, *batch.checkpoint))
    for signal_id in batch.consumed_signals:
        c.execute(_Q["consume_signal"], (t, r, signal_id))
    if batch.consumed_signals and control_pending:
        c.execute(_Q["refresh_control_pending"], (t, r))
        row = c.execute(_Q["get_run"], {"tenant_id": t, "run_id": r}).fetchone()
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


def _put_labels(c: sqlite3.Connection, tenant_id: str, run_id: str,
                labels: Sequence[StoredLabel]) -> None:
    if labels:
        c.executemany(_Q["put_label"], [(tenant_id, run_id, x.key, x.value, x.kind,
                                         int(x.sensitive)) for x in labels])


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
