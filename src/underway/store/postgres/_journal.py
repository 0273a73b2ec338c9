"""The journal and run index of :class:`~underway.store.postgres.PostgresStore`: events,
checkpoints, blobs and the runs table."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from ... import faults
from ...errors import ConflictError, FencedError, RunNotFound
from .._sqlbase.journal import SQLJournal
from ..journal import AppendResult
from ..records import AppendBatch, ForkLink, NewRun, RunRecord, StoredLabel
from ._connection import _Q, Connection, _run
from ._inbox import _signal_params
from ._pipelines import pipelined


class Journal(SQLJournal, Connection):
    """:class:`~underway.store.journal.JournalStore` and
    :class:`~underway.store.runs.RunStore` on PostgreSQL: an append is one pipeline, so
    one round trip and one commit."""

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the one with the same key."""
        self._write_large(new.tenant_id, new.blobs)
        params = _run_params(new)
        with self._pool.connection() as conn:
            with pipelined(conn):
                created = conn.execute(_Q["create_run"], params)
                # Queued behind the insert in the same round trip: finds the run that made
                # the insert a no-op when the idempotency key was already taken.
                existing = (
                    conn.execute(_Q["find_by_idempotency"], params)
                    if new.idempotency_key is not None else None
                )
                conn.execute(_Q["notify_run"], params, prepare=True)
            row = created.fetchone()
            if row is not None:
                return _run(row), True
            found = existing.fetchone() if existing is not None else None
        if found is not None:
            return _run(found), False
        raise ConflictError(f"run {new.run_id} already exists in tenant {new.tenant_id}")

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically, fenced by lease token and expected sequence, in one round
        trip; raise ConflictError, FencedError or RunNotFound and store nothing when the
        run moved on or the lease was lost."""
        if not batch.events:
            return False
        key = {"tenant_id": batch.tenant_id, "run_id": batch.run_id}
        self._write_large(batch.tenant_id, batch.blobs)
        with self._pool.connection() as conn:
            try:
                with pipelined(conn):
                    # A pipeline with no explicit transaction runs as one implicit
                    # transaction, committed at its end.
                    answer = _queue_append(conn, batch)
            except pg_errors.NotNullViolation as exc:
                if exc.diag.table_name != "events":
                    raise
                found = conn.execute(_Q["get_run"], key).fetchone()
                head = conn.execute(_Q["last_seq"], key).fetchone()
                run = None if found is None else _run(found)
                last_seq = int(head[0]) if head else 0
                if run is not None and _accepts(run, last_seq, batch):
                    raise  # not a refusal: the events themselves were invalid
                _raise_refusal(run, last_seq, batch)
            except pg_errors.UniqueViolation as exc:
                if exc.diag.table_name != "events":
                    raise
                raise ConflictError(
                    f"run {batch.run_id}: another writer appended after seq {batch.expected_seq}"
                ) from exc
            row = answer.fetchone()
        return bool(row[0]) if row else False

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append several runs' batches in one pipelined transaction: one round trip and
        one commit for all. If any batch is refused or fails, that transaction stores
        nothing and each batch is appended again on its own, so the refused one is left
        out and the others commit (refusals are rare: a lost lease, a second writer)."""
        out: list[AppendResult | None] = [None] * len(batches)
        for batch in batches:
            self._write_large(batch.tenant_id, batch.blobs)
        together = [i for i, b in enumerate(batches) if b.events and not b.signals]
        # Runs in one order in every group, so two groups (or a group and a signal's
        # sender, which locks runs in this order too) cannot deadlock.
        together.sort(key=lambda i: (batches[i].tenant_id, batches[i].run_id))
        if len(together) > 1:
            try:
                with self._pool.connection() as conn:
                    with pipelined(conn):
                        if not all(_plain(batches[i]) for i in together):
                            answers = [(i, _queue_append(conn, batches[i], shared=True))
                                       for i in together]
                        else:
                            answers = []
                            fenced = _queue_group(conn, [batches[i] for i in together])
                        _queue_shared(conn, [batches[i] for i in together])
                        faults.point("group.uncommitted")
                    if not answers:
                        # One row per batch: its place in ``together`` (from 1), and
                        # whether control signals wait.
                        for at, pending in fenced.fetchall():
                            out[together[at - 1]] = bool(pending)
                    for i, answer in answers:
                        row = answer.fetchone()
                        out[i] = bool(row[0]) if row else False
            except psycopg.Error:
                # Nothing of the group committed; or, when the connection was lost at the
                # commit (a failover), all of it may have. Each batch is tried on its own
                # below, fenced by its journal head: one that did commit is refused, and
                # its run is reloaded from the journal, never assumed either way.
                out = [None] * len(batches)
        for i, batch in enumerate(batches):
            if out[i] is None:
                try:
                    out[i] = self.append(batch)
                except Exception as exc:
                    out[i] = exc
        return [r for r in out if r is not None]

    def _put_chunk(self, params: dict[str, Any]) -> None:
        """A chunk's transaction, with ``synchronous_commit`` off: its commit does not
        wait for the log's flush; the next synchronous commit (the event's) flushes it."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(_Q["put_blob_chunk"], params)

    def fork_run(self, new: NewRun, link: ForkLink) -> RunRecord:
        """Create the fork and append the parent's event in one transaction, the parent's
        row locked while its lease and head are checked."""
        key = {"tenant_id": link.tenant_id, "run_id": link.run_id}
        self._write_large(new.tenant_id, new.blobs)
        with self._pool.connection() as conn, conn.transaction():
            parent = conn.execute(_Q["fork_parent"], key).fetchone()
            if parent is None:
                raise RunNotFound(link.tenant_id, link.run_id)
            owner, expires, head = parent
            if owner is not None and (expires or 0) >= link.now:
                raise ConflictError(
                    f"run {link.run_id} is being advanced by {owner}; fork it once that "
                    "worker has handed it back")
            if head != link.expected_seq:
                raise ConflictError(
                    f"run {link.run_id}: expected last seq {link.expected_seq}, found {head}")
            # A fork is never found by an idempotency key: it is always a new run.
            row = conn.execute(_Q["create_run"], _run_params(
                dataclasses.replace(new, idempotency_key=None))).fetchone()
            if row is None:
                raise ConflictError(
                    f"run {new.run_id} already exists in tenant {new.tenant_id}")
            e = link.event
            try:
                conn.execute(_Q["fork_append"], {**key, "seq": e.seq, "type": e.type,
                                                 "payload": e.payload, "hash": e.hash,
                                                 "now": link.now})
            except pg_errors.UniqueViolation as exc:
                # Another writer appended after the head this statement's snapshot saw.
                raise ConflictError(
                    f"run {link.run_id}: another writer appended after seq "
                    f"{link.expected_seq}") from exc
            conn.execute(_Q["notify_run"], _run_params(new))
        return _run(row)

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        return [(r[0], r[1]) for r in self._all("journaled_runs", tenant_id=tenant_id)]

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        rows = self._all("journal_heads", tenant_id=tenant_id)
        return [(r[0], r[1], r[2], r[3]) for r in rows]


def _queue_append(conn: psycopg.Connection[Any], batch: AppendBatch, *, shared: bool = False
                  ) -> psycopg.Cursor[Any]:
    """Queue one batch's statements on ``conn``'s open pipeline; return the cursor whose
    row says whether control signals wait in the run's inbox. With ``shared``, its run
    update and checkpoint are left to :func:`_queue_shared`."""
    last, u = batch.events[-1], batch.update
    key = {"tenant_id": batch.tenant_id, "run_id": batch.run_id}
    settle = _settles(batch)
    # A batch that settles its run updates the row before settle_run reads it.
    shared = shared and not settle
    if batch.signals:
        # Every run this commit touches, locked in one order: two runs signalling each
        # other (a parent's cancel cascade, its child's end) would otherwise each hold
        # its own row and wait for the other's.
        for tenant_id, run_id in sorted(
            {(batch.tenant_id, batch.run_id)}
            | {(s.tenant_id, s.run_id) for s in batch.signals}
        ):
            conn.execute(_Q["lock_run"], {"tenant_id": tenant_id, "run_id": run_id},
                         prepare=True)
    advanced = conn.execute(_Q["append_events"], {
        **key,
        "expected_seq": batch.expected_seq, "fence": batch.fence,
        "seqs": [e.seq for e in batch.events],
        "types": [e.type for e in batch.events],
        "payloads": [e.payload for e in batch.events],
        "hashes": [e.hash for e in batch.events],
    }, prepare=True)
    if u is not None and not shared:
        conn.execute(_Q["advance_run"], {
            **key,
            "last_seq": last.seq, "last_hash": last.hash, "status": u.status,
            "step": u.step, "next_wake_at": u.next_wake_at,
            "waiting_signal": u.waiting_signal, "error": u.error,
            "request_kind": u.request_kind, "now": batch.now,
        }, prepare=True)
    if batch.blobs:
        keys = sorted(batch.blobs)
        conn.execute(_Q["insert_blobs"], {
            "tenant_id": batch.tenant_id, "keys": keys,
            "data": [bytes(batch.blobs[k]) for k in keys],
        }, prepare=True)
    if batch.labels:
        conn.execute(_Q["put_labels"], {**key, **_label_params(batch.labels)},
                     prepare=True)
    if batch.checkpoint is not None and not shared:
        seq, state = batch.checkpoint
        conn.execute(_Q["upsert_checkpoint"], {**key, "seq": seq, "state": state},
                     prepare=True)
    for signal_id in batch.consumed_signals:
        conn.execute(_Q["consume_signal"], {**key, "signal_id": signal_id}, prepare=True)
    settled = conn.execute(_Q["settle_run"], {
        **key, "consumed": bool(batch.consumed_signals), "now": batch.now,
        "release": batch.release,
    }, prepare=True) if settle else None
    for signal in batch.signals:
        params = _signal_params(signal)
        conn.execute(_Q["lock_run"], params, prepare=True)
        conn.execute(_Q["send_signal"], params, prepare=True)
        conn.execute(_Q["notify_run"], params, prepare=True)
    return settled if settled is not None else advanced


def _queue_group(conn: psycopg.Connection[Any], batches: Sequence[AppendBatch]
                 ) -> psycopg.Cursor[Any]:
    """Queue the fences and events of the plain ``batches`` (:func:`_plain`) as one
    statement; its rows are each batch's place (from 1) and whether control signals
    wait."""
    events = [(n, e) for n, b in enumerate(batches, 1) for e in b.events]
    return conn.execute(_Q["append_group"], {
        "tenant_ids": [b.tenant_id for b in batches],
        "run_ids": [b.run_id for b in batches],
        "expected_seqs": [b.expected_seq for b in batches],
        "fences": [b.fence for b in batches],
        "batch_of": [n for n, _ in events],
        "seqs": [e.seq for _, e in events],
        "types": [e.type for _, e in events],
        "payloads": [e.payload for _, e in events],
        "hashes": [e.hash for _, e in events],
    }, prepare=True)


def _queue_shared(conn: psycopg.Connection[Any], batches: Sequence[AppendBatch]) -> None:
    """Queue the run updates and checkpoints of ``batches`` (queued by
    :func:`_queue_append` with ``shared``) as one statement each: two statements for a
    group, not two a batch. A refused batch has already aborted the transaction."""
    batches = [b for b in batches if not _settles(b)]
    ups = [(b, b.update, b.events[-1]) for b in batches if b.update is not None]
    if ups:
        conn.execute(_Q["advance_runs"], {
            "tenant_ids": [b.tenant_id for b, _, _ in ups],
            "run_ids": [b.run_id for b, _, _ in ups],
            "last_seqs": [e.seq for _, _, e in ups],
            "last_hashes": [e.hash for _, _, e in ups],
            "statuses": [u.status for _, u, _ in ups],
            "steps": [u.step for _, u, _ in ups],
            "next_wake_ats": [u.next_wake_at for _, u, _ in ups],
            "waiting_signals": [u.waiting_signal for _, u, _ in ups],
            "errors": [u.error for _, u, _ in ups],
            "request_kinds": [u.request_kind for _, u, _ in ups],
            "nows": [b.now for b, _, _ in ups],
        }, prepare=True)
    cps = [(b, b.checkpoint) for b in batches if b.checkpoint is not None]
    if cps:
        conn.execute(_Q["upsert_checkpoints"], {
            "tenant_ids": [b.tenant_id for b, _ in cps],
            "run_ids": [b.run_id for b, _ in cps],
            "seqs": [c[0] for _, c in cps],
            "states": [c[1] for _, c in cps],
        }, prepare=True)


def _plain(batch: AppendBatch) -> bool:
    """Whether ``batch`` is only events, a run update and a checkpoint (no blobs, labels
    or settling), all that :func:`_queue_group` and :func:`_queue_shared` write."""
    return not (batch.blobs or batch.labels or _settles(batch))


def _settles(batch: AppendBatch) -> bool:
    """Whether ``batch`` needs ``settle_run`` after its run's update."""
    u = batch.update
    return (bool(batch.consumed_signals) or batch.release
            or (u is not None and u.waiting_signal is not None))


def _accepts(row: RunRecord, last_seq: int, batch: AppendBatch) -> bool:
    return (
        last_seq == batch.expected_seq and row.lease_token == batch.fence
        and row.lease_owner is not None
    )

def _raise_refusal(row: RunRecord | None, last_seq: int, batch: AppendBatch) -> None:
    if row is None:
        raise RunNotFound(batch.tenant_id, batch.run_id)
    if row.lease_token != batch.fence or row.lease_owner is None:
        raise FencedError(
            f"run {batch.run_id}: lease token {batch.fence} is stale "
            f"(current {row.lease_token}); another worker owns this run"
        )
    raise ConflictError(
        f"run {batch.run_id}: expected last seq {batch.expected_seq}, found {last_seq}"
    )

def _run_params(new: NewRun) -> dict[str, Any]:
    """Parameters of the ``create_run`` and ``find_by_idempotency`` queries."""
    ev = new.first_event
    keys = sorted(new.blobs)
    return {
        "tenant_id": new.tenant_id, "run_id": new.run_id, "flow": new.flow,
        "step": new.step, "idempotency_key": new.idempotency_key, "seq": ev.seq,
        "type": ev.type, "payload": ev.payload, "hash": ev.hash,
        "next_wake_at": new.next_wake_at, "now": new.now, "queue": new.queue,
        "subject": new.subject, "purpose": new.purpose,
        "blob_keys": keys, "blob_data": [bytes(new.blobs[k]) for k in keys],
        **_label_params(new.labels),
    }


def _label_params(labels: Sequence[StoredLabel]) -> dict[str, Any]:
    """The label arrays of the ``create_run`` and ``put_labels`` statements."""
    return {"label_keys": [x.key for x in labels], "label_values": [x.value for x in labels],
            "label_kinds": [x.kind for x in labels],
            "label_sensitive": [x.sensitive for x in labels]}
