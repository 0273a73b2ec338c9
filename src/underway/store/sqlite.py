"""SQLite store: the embedded default. WAL journal, ``synchronous=FULL``.

Writers serialize through ``BEGIN IMMEDIATE``, which is also what makes claiming correct
when several worker processes share one database file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ConflictError, FencedError, MigrationError, RunNotFound
from . import limits, queries
from .base import (
    AppendBatch,
    ApproverRecord,
    IntakeRecord,
    IntakeRequest,
    Lease,
    NewRun,
    QueueConfig,
    RunRecord,
    ScheduleRecord,
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

    # -- runs ---------------------------------------------------------------------------
    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the one with the same key."""
        with self._tx() as c:
            return _create_run(c, new)

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically, fenced by lease token and expected sequence."""
        if not batch.events:
            return False
        last = batch.events[-1]
        u = batch.update
        t, r = batch.tenant_id, batch.run_id
        with self._tx() as c:
            # BEGIN IMMEDIATE holds the write lock: reading the fence is as good as writing it.
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
        return control_pending

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events after ``after_seq``."""
        rows = self._query("load_events", tenant_id, run_id, after_seq)
        return [StoredEvent(r[0], r[1], _bytes(r[2]), r[3]) for r in rows]

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
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, filtered and paged."""
        params = {
            "tenant_id": tenant_id, "status": status, "flow": flow, "since": since,
            "until": until, "after_at": after[0] if after else None,
            "after_id": after[1] if after else None, "prefix": id_prefix, "limit": limit,
        }
        with self._lock:
            rows = self._conn.execute(_Q["list_runs"], params).fetchall()
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

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        if tenant_id is None:
            rows = self._query("journal_heads")
        else:
            rows = self._query("journal_heads_of_tenant", tenant_id)
        return [(r[0], r[1], r[2], r[3]) for r in rows]

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
        queues: list[str] | None = None,
    ) -> list[Lease]:
        """Lease due runs nobody holds, fairly across tenants, within the queues' limits."""
        wanted = None if queues is None else json.dumps(list(queues))
        with self._tx() as c:
            configs = limits.limited(
                QueueConfig(r[0], r[1], r[2], r[3], bool(r[4]))
                for r in c.execute(_Q["queue_limits"], {"queues": wanted})
            )
            names = json.dumps(sorted(configs))
            leased: dict[str, int] = {}
            buckets: dict[limits.BucketKey, limits.Bucket] = {}
            if configs:
                leased = {
                    r[0]: int(r[1])
                    for r in c.execute(_Q["leased_per_queue"], {"queues": names, "now": now})
                }
                buckets = {
                    (r[0], r[1]): limits.Bucket(r[2], r[3])
                    for r in c.execute(_Q["queue_buckets"], {"queues": names})
                }
            plan = limits.ClaimPlan(configs, leased, buckets, now=now, limit=limit)
            leases = []
            while plan.wants_more():
                rows = c.execute(_Q["claim_candidates"], {
                    "now": now, "queues": wanted, "tenant_id": tenant_id, "run_id": run_id,
                    "full": json.dumps(plan.full()), "empty": json.dumps(plan.empty()),
                    "limit": plan.wanted(), "window": limits.window(plan.wanted()),
                }).fetchall()
                for cand in plan.admit(limits.Candidate(r[0], r[1], r[2], r[3] == 0)
                                       for r in rows):
                    token = c.execute(
                        _Q["take_lease"], (owner, now + ttl, cand.tenant_id, cand.run_id)
                    ).fetchone()[0]
                    leases.append(
                        Lease(cand.tenant_id, cand.run_id, owner, int(token), now + ttl)
                    )
            c.executemany(
                _Q["put_bucket"], [(q, t, tokens, now) for (q, t), tokens in plan.spent.items()]
            )
            return leases

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """Earliest due time of an unfinished, unheld run of the queues."""
        wanted = None if queues is None else json.dumps(list(queues))
        with self._lock:
            row = self._conn.execute(
                _Q["next_due_at"], {"now": now, "queues": wanted}
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def set_queue(self, config: QueueConfig) -> None:
        """Create or replace a queue's limits; its rate buckets start full."""
        q = config
        with self._tx() as c:
            c.execute(_Q["set_queue"], (
                q.name, q.max_concurrency, q.rate_limit, q.rate_period_s, int(q.per_tenant),
                time.time(),
            ))
            c.execute(_Q["reset_queue_buckets"], (q.name,))

    def list_queues(self) -> list[QueueConfig]:
        """Every configured queue."""
        return [
            QueueConfig(r[0], r[1], r[2], r[3], bool(r[4])) for r in self._query("list_queues")
        ]

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits."""
        with self._tx() as c:
            c.execute(_Q["reset_queue_buckets"], (name,))
            return c.execute(_Q["delete_queue"], (name,)).rowcount == 1

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

    def release(self, lease: Lease, *, retry_at: float | None = None) -> None:
        """Give a lease back (not due again before ``retry_at`` when given)."""
        key = (lease.tenant_id, lease.run_id, lease.owner, lease.token)
        with self._tx() as c:
            if retry_at is None:
                c.execute(_Q["release_lease"], key)
            else:
                c.execute(_Q["release_lease_until"], (retry_at, retry_at, *key))

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
        with self._tx() as c:
            return _send_signal(c, signal)

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._query("pending_signals", tenant_id, run_id)
        ]

    def circuit_admit(self, tenant_id: str, name: str, *, now: float, cooldown: float) -> str:
        """Closed, open, or the half-open trial."""
        with self._tx() as c:
            row = c.execute(_Q["circuit_get"], (tenant_id, name)).fetchone()
            if row is None or row["open_until"] is None:
                return "closed"
            trial = row["trial_until"]
            if now < row["open_until"] or (trial is not None and now < trial):
                return "open"
            c.execute(_Q["circuit_start_trial"], (now + cooldown, now, tenant_id, name))
            return "trial"

    def circuit_record(
        self, tenant_id: str, name: str, *, ok: bool, now: float, threshold: int,
        cooldown: float,
    ) -> None:
        """Close on success; open on the threshold-th failure or a failed trial."""
        with self._tx() as c:
            row = c.execute(_Q["circuit_get"], (tenant_id, name)).fetchone()
            failures = 0 if row is None else int(row["failures"])
            was_open = row is not None and row["open_until"] is not None
            if ok:
                failures, open_until = 0, None
            else:
                failures += 1
                open_until = now + cooldown if was_open or failures >= threshold else None
            c.execute(_Q["circuit_put"], (tenant_id, name, failures, open_until, now))

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key."""
        found: dict[str, bytes] = {}
        with self._lock:
            for key in keys:
                row = self._conn.execute(_Q["get_blob"], (tenant_id, key)).fetchone()
                if row is not None:
                    found[row[0]] = bytes(row[1])
        return found

    # -- schedules and intake -------------------------------------------------------------
    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        s = schedule
        with self._tx() as c:
            row = c.execute(_Q["put_schedule"], (
                s.tenant_id, s.name, s.flow, s.cron, s.timezone, s.input, s.queue,
                s.next_fire_at, int(s.enabled), s.created_at,
            )).fetchone()
        return _schedule(row)

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        rows = self._query("get_schedule", tenant_id, name)
        return _schedule(rows[0]) if rows else None

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        return [_schedule(r) for r in self._query("list_schedules", tenant_id)]

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        with self._tx() as c:
            return c.execute(_Q["delete_schedule"], (tenant_id, name)).rowcount > 0

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows`` under the write lock."""
        names = json.dumps(list(flows))
        # Workers ask on every round: take the database's one write lock only for a tick
        # that is due (readers never wait in WAL mode).
        due = self._query("next_schedule_at", now, names)[0][0]
        if due is None or due > now:
            return []
        with self._tx() as c:
            rows = c.execute(_Q["claim_schedules"], (until, now, now, names, limit)).fetchall()
        found = [_schedule(r) for r in rows]
        return sorted(found, key=lambda s: (s.next_fire_at, s.tenant_id, s.name))

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """Move a schedule on from the tick ``expected``."""
        with self._tx() as c:
            cur = c.execute(
                _Q["advance_schedule"], (next_fire_at, fired_at, tenant_id, name, expected)
            )
            return cur.rowcount == 1

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """Earliest tick of an enabled, unclaimed schedule of ``flows``."""
        value = self._query("next_schedule_at", now, json.dumps(list(flows)))[0][0]
        return None if value is None else float(value)

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key, in one
        transaction under the write lock."""
        r = request
        with self._tx() as c:
            seen = c.execute(_Q["get_intake"], (r.tenant_id, r.idempotency_key)).fetchone()
            if seen is not None:
                return _intake(seen), False
            owner = c.execute(_Q["entity_owner"], (r.tenant_id, r.entity_id)).fetchone()
            if owner is not None:
                run_id = str(owner[0])
                _send_signal(c, SignalRecord(
                    r.tenant_id, run_id, r.idempotency_key, r.signal, r.payload, r.sender, r.now
                ))
                action = "signalled"
            elif r.new_run is not None:
                run, _ = _create_run(c, r.new_run)
                run_id, action = run.run_id, "started"
                c.execute(_Q["set_entity_owner"], (r.tenant_id, r.entity_id, run_id, r.now))
            else:
                return None, False
            record = IntakeRecord(
                r.tenant_id, r.idempotency_key, r.entity_id, r.event_type, action, run_id, r.now
            )
            c.execute(_Q["insert_intake"], (
                record.tenant_id, record.idempotency_key, record.entity_id, record.event_type,
                record.action, record.run_id, record.created_at,
            ))
            return record, True

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        rows = self._query("get_intake", tenant_id, idempotency_key)
        return _intake(rows[0]) if rows else None

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        rows = self._query("entity_owner", tenant_id, entity_id)
        return str(rows[0][0]) if rows else None

    # -- approvers and decision nonces ----------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        with self._tx() as c:
            c.execute(_Q["put_approver"], (
                rec.tenant_id, rec.approver_id, rec.public_key, json.dumps(list(rec.roles)),
                rec.created_at, rec.revoked_at,
            ))

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        rows = self._query("get_approver", tenant_id, approver_id)
        return _approver(rows[0]) if rows else None

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        return [_approver(r) for r in self._query("list_approvers", tenant_id)]

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        with self._tx() as c:
            return c.execute(_Q["revoke_approver"], (at, tenant_id, approver_id)).rowcount == 1

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """True the first time the nonce is used in the tenant (or again for the same run
        and request: a decision redelivered after a crash)."""
        with self._tx() as c:
            cur = c.execute(_Q["use_nonce"], (tenant_id, nonce, run_id, request_id, at))
            if cur.rowcount == 1:
                return True
            owner = c.execute(_Q["nonce_owner"], (tenant_id, nonce)).fetchone()
            return owner is not None and tuple(owner) == (run_id, request_id)

    def close(self) -> None:
        """Close the connection."""
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
            ev.seq, ev.hash, new.next_wake_at, new.now, new.now, new.queue,
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


def _send_signal(c: sqlite3.Connection, s: SignalRecord) -> bool:
    """Queue a signal in the open transaction; wake its run if it waits for it."""
    cur = c.execute(
        _Q["insert_signal"],
        (s.tenant_id, s.run_id, s.signal_id, s.name, s.payload, s.sender, s.created_at),
    )
    if cur.rowcount == 0:
        return False
    c.execute(_Q["wake_for_signal"], (s.created_at, s.name, s.tenant_id, s.run_id, s.name, s.name))
    return True


def _schedule(row: sqlite3.Row) -> ScheduleRecord:
    return ScheduleRecord(
        row[0], row[1], row[2], row[3], row[4], bytes(row[5]), row[6], row[7], bool(row[8]),
        row[9], row[10], row[11],
    )


def _intake(row: sqlite3.Row) -> IntakeRecord:
    return IntakeRecord(*row)


def _approver(row: sqlite3.Row) -> ApproverRecord:
    return ApproverRecord(
        row[0], row[1], row[2], tuple(json.loads(row[3])), row[4], row[5]
    )


def _bytes(value: object) -> bytes:
    """A BLOB column's value as bytes: SQLite keeps whatever type was written, and text
    written by hand must reach the audit as bytes rather than fail to load."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements (no semicolons inside our DDL literals)."""
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


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
