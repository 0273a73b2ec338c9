"""PostgreSQL store: the path to many worker machines. psycopg 3 with a connection pool.

Connections run in autocommit mode; a multi-statement operation is sent as one pipeline
and so runs as one implicit transaction that commits at the pipeline's sync point, or
rolls back whole when any statement in it fails. An append therefore costs one round trip
and one durable commit, like a single-row insert. Workers claim runs with
``FOR UPDATE SKIP LOCKED``; appends are fenced by the run row's lease token and last
sequence number inside the same transaction.

``postgresql://user@host:port/db?schema=name`` keeps every table in schema ``name``
(created by :meth:`PostgresStore.migrate`); without it the server's search path applies.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import (
    ConfigurationError,
    ConflictError,
    FencedError,
    MigrationError,
    RunNotFound,
    StoreError,
)
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

_Q = queries.load("postgres")


def split_url(url: str) -> tuple[str, str | None]:
    """The libpq connection URL without ``schema=``, and the schema it named (if any)."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in params if k == "schema"]
    if len(schemas) > 1 or (schemas and not schemas[0]):
        raise ConfigurationError(f"PostgreSQL URL {url!r} must name at most one schema")
    rest = urlencode([(k, v) for k, v in params if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), (schemas[0] if schemas else None)


def _run(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(*row)


class PostgresStore:
    """A :class:`~underway.store.base.Store` on a PostgreSQL database (one schema of it).

    ``min_size``/``max_size`` bound the connection pool; ``connect_timeout`` is how long
    opening the store waits for the server before giving up.
    """

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout: float = 10.0,
    ) -> None:
        self.conninfo, self.schema = split_url(url)
        self._pool = ConnectionPool(
            self.conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            configure=self._configure,
            open=False,
            name=f"underway:{self.schema or 'default'}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            where = urlsplit(self.conninfo)
            raise StoreError(
                f"cannot connect to PostgreSQL at {where.hostname}:{where.port or 5432}"
                f"{where.path} within {connect_timeout:g}s; is the server running and the "
                "URL right?"
            ) from exc
        # A database migrated by a newer underway is refused before anything is written.
        try:
            found, known = self.schema_version(), queries.latest_version("postgres")
        except BaseException:
            self._pool.close()
            raise
        if found > known:
            self._pool.close()
            raise MigrationError(queries.newer_schema_message(found, known))

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        if self.schema is not None:
            path = sql.Identifier(self.schema).as_string(conn)
            conn.execute(_Q["set_search_path"], {"path": path})

    # -- schema -------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The highest migration applied (0 before the first)."""
        with self._pool.connection() as conn:
            exists = conn.execute(_Q["has_schema_version_table"]).fetchone()
            if not exists or not exists[0]:
                return 0
            row = conn.execute(_Q["schema_version"]).fetchone()
            return int(row[0]) if row else 0

    def migrate(self, *, target: int | None = None) -> int:
        """Apply pending numbered migrations (up to ``target``, default all) in one
        transaction that holds an advisory lock, so concurrent migrators take turns."""
        name = "(version table)"
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute(_Q["migration_lock"], {"schema": self.schema or ""})
                if self.schema is not None:
                    conn.execute(
                        sql.SQL(_Q["create_schema"]).format(schema=sql.Identifier(self.schema))
                    )
                conn.execute(_Q["schema_version_table"])
                row = conn.execute(_Q["schema_version"]).fetchone()
                current = int(row[0]) if row else 0
                known = queries.latest_version("postgres")
                if current > known:
                    # Raising rolls the whole transaction back: nothing is written.
                    raise MigrationError(queries.newer_schema_message(current, known))
                for version, name, text in queries.migrations("postgres"):
                    if version <= current or (target is not None and version > target):
                        continue
                    conn.execute(text)
                    conn.execute(
                        _Q["record_migration"],
                        {"version": version, "name": name, "applied_at": time.time()},
                    )
                    current = version
        except psycopg.Error as exc:
            raise MigrationError(
                f"migration {name} failed on schema {self.schema or '(search path)'}: {exc}"
            ) from exc
        return current

    # -- runs ---------------------------------------------------------------------------
    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the one with the same key."""
        params = _run_params(new)
        with self._pool.connection() as conn:
            with conn.pipeline():
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
        last, u = batch.events[-1], batch.update
        key = {"tenant_id": batch.tenant_id, "run_id": batch.run_id}
        settle = (
            bool(batch.consumed_signals) or batch.release
            or (u is not None and u.waiting_signal is not None)
        )
        with self._pool.connection() as conn:
            try:
                with conn.pipeline():
                    advanced = conn.execute(_Q["append_events"], {
                        **key,
                        "expected_seq": batch.expected_seq, "fence": batch.fence,
                        "seqs": [e.seq for e in batch.events],
                        "types": [e.type for e in batch.events],
                        "payloads": [e.payload for e in batch.events],
                        "hashes": [e.hash for e in batch.events],
                    }, prepare=True)
                    if u is not None:
                        conn.execute(_Q["advance_run"], {
                            **key,
                            "last_seq": last.seq, "last_hash": last.hash, "status": u.status,
                            "step": u.step, "next_wake_at": u.next_wake_at,
                            "waiting_signal": u.waiting_signal, "error": u.error,
                            "now": batch.now,
                        }, prepare=True)
                    if batch.blobs:
                        keys = sorted(batch.blobs)
                        conn.execute(_Q["insert_blobs"], {
                            "tenant_id": batch.tenant_id, "keys": keys,
                            "data": [batch.blobs[k] for k in keys],
                        }, prepare=True)
                    if batch.checkpoint is not None:
                        seq, state = batch.checkpoint
                        conn.execute(
                            _Q["upsert_checkpoint"], {**key, "seq": seq, "state": state},
                            prepare=True,
                        )
                    if batch.consumed_signals:
                        conn.execute(
                            _Q["consume_signals"],
                            {**key, "signal_ids": list(batch.consumed_signals)},
                            prepare=True,
                        )
                    settled = conn.execute(_Q["settle_run"], {
                        **key, "consumed": bool(batch.consumed_signals), "now": batch.now,
                        "release": batch.release,
                    }, prepare=True) if settle else None
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
            row = (settled if settled is not None else advanced).fetchone()
        return bool(row[0]) if row else False

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events after ``after_seq``."""
        rows = self._all(
            "load_events", tenant_id=tenant_id, run_id=run_id, after_seq=after_seq
        )
        return [StoredEvent(r[0], r[1], bytes(r[2]), r[3]) for r in rows]

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The latest checkpoint."""
        rows = self._all("load_checkpoint", tenant_id=tenant_id, run_id=run_id)
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints of a run or a whole tenant."""
        if run_id is None:
            return self._count("delete_checkpoints_of_tenant", tenant_id=tenant_id)
        return self._count("delete_checkpoints_of_run", tenant_id=tenant_id, run_id=run_id)

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row."""
        rows = self._all("get_run", tenant_id=tenant_id, run_id=run_id)
        return _run(rows[0]) if rows else None

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, filtered and paged."""
        rows = self._all(
            "list_runs", tenant_id=tenant_id, status=status, flow=flow, since=since,
            until=until, after_at=after[0] if after else None,
            after_id=after[1] if after else None, prefix=id_prefix, limit=limit,
        )
        return [_run(r) for r in rows]

    def tenants(self) -> list[str]:
        """Tenants with runs."""
        return [r[0] for r in self._all("tenants")]

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        return [(r[0], r[1]) for r in self._all("journaled_runs", tenant_id=tenant_id)]

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        rows = self._all("journal_heads", tenant_id=tenant_id)
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
        """Lease due runs nobody holds, fairly across tenants, within the queues' limits,
        skipping rows other workers are locking. Claims on a limited queue take turns on
        its ``queues`` row; claims on unlimited queues never wait for each other."""
        wanted = None if queues is None else list(queues)
        with self._pool.connection() as conn, conn.transaction():
            configs = limits.limited(
                QueueConfig(*r) for r in conn.execute(_Q["queue_limits"], {"queues": wanted})
            )
            names = sorted(configs)
            leased: dict[str, int] = {}
            buckets: dict[limits.BucketKey, limits.Bucket] = {}
            if configs:
                leased = {
                    r[0]: int(r[1])
                    for r in conn.execute(_Q["leased_per_queue"], {"queues": names, "now": now})
                }
                buckets = {
                    (r[0], r[1]): limits.Bucket(r[2], r[3])
                    for r in conn.execute(_Q["queue_buckets"], {"queues": names})
                }
            plan = limits.ClaimPlan(configs, leased, buckets, now=now, limit=limit)
            leases: list[Lease] = []
            while plan.wants_more():
                empty = plan.empty()
                rows = conn.execute(_Q["claim_candidates"], {
                    "now": now, "queues": wanted, "tenant_id": tenant_id, "run_id": run_id,
                    "full": plan.full(), "empty_queues": [q for q, _ in empty],
                    "empty_tenants": [t for _, t in empty], "limit": plan.wanted(),
                    "window": limits.window(plan.wanted()),
                }, prepare=True).fetchall()
                chosen = plan.admit(limits.Candidate(r[0], r[1], r[2], r[3] == 0) for r in rows)
                if not chosen:
                    continue
                taken = conn.execute(_Q["take_leases"], {
                    "owner": owner, "expires_at": now + ttl,
                    "tenant_ids": [c.tenant_id for c in chosen],
                    "run_ids": [c.run_id for c in chosen],
                }, prepare=True).fetchall()
                tokens = {(r[0], r[1]): int(r[2]) for r in taken}
                leases += [
                    Lease(c.tenant_id, c.run_id, owner, tokens[(c.tenant_id, c.run_id)],
                          now + ttl)
                    for c in chosen
                ]
            if plan.spent:
                spent = sorted(plan.spent.items())
                conn.execute(_Q["put_buckets"], {
                    "now": now, "queues": [k[0] for k, _ in spent],
                    "tenant_ids": [k[1] for k, _ in spent], "tokens": [t for _, t in spent],
                })
        return leases

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """Earliest due time of an unfinished, unheld run of the queues."""
        rows = self._all("next_due_at", now=now, queues=None if queues is None else list(queues))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def set_queue(self, config: QueueConfig) -> None:
        """Create or replace a queue's limits; its rate buckets start full."""
        q = config
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_Q["set_queue"], {
                "name": q.name, "max_concurrency": q.max_concurrency,
                "rate_limit": q.rate_limit, "rate_period_s": q.rate_period_s,
                "per_tenant": q.per_tenant, "now": time.time(),
            })
            conn.execute(_Q["reset_queue_buckets"], {"name": q.name})

    def list_queues(self) -> list[QueueConfig]:
        """Every configured queue."""
        return [QueueConfig(*r) for r in self._all("list_queues")]

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_Q["reset_queue_buckets"], {"name": name})
            return conn.execute(_Q["delete_queue"], {"name": name}).rowcount == 1

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a held lease; None when it was lost."""
        renewed = self._count(
            "renew_lease", expires_at=now + ttl, tenant_id=lease.tenant_id,
            run_id=lease.run_id, owner=lease.owner, token=lease.token,
        )
        if renewed != 1:
            return None
        return Lease(lease.tenant_id, lease.run_id, lease.owner, lease.token, now + ttl)

    def release(self, lease: Lease, *, retry_at: float | None = None) -> None:
        """Give a lease back (not due again before ``retry_at`` when given)."""
        self._count(
            "release_lease" if retry_at is None else "release_lease_until",
            tenant_id=lease.tenant_id, run_id=lease.run_id, owner=lease.owner,
            token=lease.token, retry_at=retry_at,
        )

    def held_leases(self, *, now: float) -> list[tuple[str, str, str]]:
        """Unexpired leases."""
        return [(r[0], r[1], r[2]) for r in self._all("held_leases", now=now)]

    def expire_lease(self, tenant_id: str, run_id: str, owner: str) -> int:
        """End a dead owner's lease."""
        return self._count("expire_lease", tenant_id=tenant_id, run_id=run_id, owner=owner)

    def next_wake_at(self) -> float | None:
        """Earliest due time of unfinished runs."""
        rows = self._all("next_wake_at")
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    # -- signals and blobs --------------------------------------------------------------
    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        params = _signal_params(signal)
        with self._pool.connection() as conn:
            with conn.pipeline():
                conn.execute(_Q["lock_run"], params, prepare=True)
                sent = conn.execute(_Q["send_signal"], params, prepare=True)
                conn.execute(_Q["notify_run"], params, prepare=True)
            row = sent.fetchone()
        return bool(row and row[0])

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._all("pending_signals", tenant_id=tenant_id, run_id=run_id)
        ]

    def circuit_admit(self, tenant_id: str, name: str, *, now: float, cooldown: float) -> str:
        """Closed, open, or the half-open trial, decided in one statement."""
        rows = self._all(
            "circuit_admit", tenant_id=tenant_id, circuit=name, now=now,
            trial_until=now + cooldown,
        )
        return str(rows[0][0])

    def circuit_record(
        self, tenant_id: str, name: str, *, ok: bool, now: float, threshold: int,
        cooldown: float,
    ) -> None:
        """Close on success; open on the threshold-th failure or a failed trial."""
        self._count(
            "circuit_record", tenant_id=tenant_id, circuit=name, ok=ok, now=now,
            threshold=threshold, open_until=now + cooldown,
        )

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key, in one query."""
        if not keys:
            return {}
        rows = self._all("get_blobs", tenant_id=tenant_id, keys=list(keys))
        return {r[0]: bytes(r[1]) for r in rows}

    # -- schedules and intake -------------------------------------------------------------
    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        s = schedule
        rows = self._all(
            "put_schedule", tenant_id=s.tenant_id, schedule=s.name, flow=s.flow, cron=s.cron,
            timezone=s.timezone, input=s.input, queue=s.queue, next_fire_at=s.next_fire_at,
            enabled=s.enabled, created_at=s.created_at,
        )
        return _schedule(rows[0])

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        rows = self._all("get_schedule", tenant_id=tenant_id, schedule=name)
        return _schedule(rows[0]) if rows else None

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        return [_schedule(r) for r in self._all("list_schedules", tenant_id=tenant_id)]

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        return self._count("delete_schedule", tenant_id=tenant_id, schedule=name) > 0

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows``, skipping rows others are claiming."""
        rows = self._all(
            "claim_schedules", now=now, until=until, flows=list(flows), limit=limit
        )
        found = [_schedule(r) for r in rows]
        return sorted(found, key=lambda s: (s.next_fire_at, s.tenant_id, s.name))

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """Move a schedule on from the tick ``expected``."""
        return self._count(
            "advance_schedule", tenant_id=tenant_id, schedule=name, expected=expected,
            next_fire_at=next_fire_at, fired_at=fired_at,
        ) == 1

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """Earliest tick of an enabled, unclaimed schedule of ``flows``."""
        rows = self._all("next_schedule_at", now=now, flows=list(flows))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key, in one
        transaction; events for one entity take turns on an advisory lock."""
        r = request
        key = {
            "tenant_id": r.tenant_id, "entity_id": r.entity_id,
            "idempotency_key": r.idempotency_key,
        }
        with self._pool.connection() as conn:
            try:
                with conn.transaction():
                    conn.execute(_Q["lock_intake_entity"], key)
                    seen = conn.execute(_Q["get_intake"], key).fetchone()
                    if seen is not None:
                        return IntakeRecord(*seen), False
                    owner = conn.execute(_Q["lock_entity_owner"], key).fetchone()
                    if owner is not None:
                        run_id, action = str(owner[0]), "signalled"
                        conn.execute(_Q["send_signal"], _signal_params(SignalRecord(
                            r.tenant_id, run_id, r.idempotency_key, r.signal, r.payload,
                            r.sender, r.now,
                        )))
                    elif r.new_run is not None:
                        params = _run_params(r.new_run)
                        row = conn.execute(_Q["create_run"], params).fetchone()
                        if row is None and r.new_run.idempotency_key is not None:
                            row = conn.execute(_Q["find_by_idempotency"], params).fetchone()
                        if row is None:
                            raise ConflictError(
                                f"run {r.new_run.run_id} already exists in tenant {r.tenant_id}"
                            )
                        run_id, action = _run(row).run_id, "started"
                        conn.execute(
                            _Q["set_entity_owner"], {**key, "run_id": run_id, "now": r.now}
                        )
                    else:
                        return None, False
                    conn.execute(_Q["notify_run"], {"tenant_id": r.tenant_id, "run_id": run_id})
                    record = IntakeRecord(
                        r.tenant_id, r.idempotency_key, r.entity_id, r.event_type, action,
                        run_id, r.now,
                    )
                    inserted = conn.execute(_Q["insert_intake"], {
                        **key, "event_type": r.event_type, "action": action, "run_id": run_id,
                        "now": r.now,
                    }).fetchone()
                    if inserted is None:
                        raise _SameKeyElsewhere
                    return record, True
            except _SameKeyElsewhere:
                # The same key arrived for another entity and committed first: undone here.
                pass
            seen = conn.execute(_Q["get_intake"], key).fetchone()
        if seen is None:
            raise ConflictError(f"intake key {r.idempotency_key!r} was neither new nor recorded")
        return IntakeRecord(*seen), False

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        rows = self._all("get_intake", tenant_id=tenant_id, idempotency_key=idempotency_key)
        return IntakeRecord(*rows[0]) if rows else None

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        rows = self._all("entity_owner", tenant_id=tenant_id, entity_id=entity_id)
        return str(rows[0][0]) if rows else None

    # -- approvers and decision nonces ----------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        self._count(
            "put_approver", tenant_id=rec.tenant_id, approver_id=rec.approver_id,
            public_key=rec.public_key, roles=list(rec.roles), created_at=rec.created_at,
            revoked_at=rec.revoked_at,
        )

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        rows = self._all("get_approver", tenant_id=tenant_id, approver_id=approver_id)
        return _approver(rows[0]) if rows else None

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        return [_approver(r) for r in self._all("list_approvers", tenant_id=tenant_id)]

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        return self._count(
            "revoke_approver", tenant_id=tenant_id, approver_id=approver_id, at=at
        ) == 1

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """True the first time the nonce is used in the tenant (or again for the same run
        and request: a decision redelivered after a crash)."""
        if self._all(
            "use_nonce", tenant_id=tenant_id, nonce=nonce, run_id=run_id,
            request_id=request_id, at=at,
        ):
            return True
        owner = self._all("nonce_owner", tenant_id=tenant_id, nonce=nonce)
        return bool(owner) and tuple(owner[0]) == (run_id, request_id)

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()

    # -- companion tables (underway.knowledge) ----------------------------------------------
    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        """The store's connection pool: autocommit connections on the store's schema, for
        tables kept beside the store's own, such as the knowledge base's."""
        return self._pool

    # -- helpers ------------------------------------------------------------------------
    def _all(self, name: str, **params: Any) -> list[tuple[Any, ...]]:
        with self._pool.connection() as conn:
            return conn.execute(_Q[name], params or None).fetchall()

    def _count(self, name: str, **params: Any) -> int:
        with self._pool.connection() as conn:
            return conn.execute(_Q[name], params).rowcount


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


class _SameKeyElsewhere(Exception):
    """Rolls back an intake whose key another transaction recorded first."""


def _run_params(new: NewRun) -> dict[str, Any]:
    """Parameters of the ``create_run`` and ``find_by_idempotency`` queries."""
    ev = new.first_event
    keys = sorted(new.blobs)
    return {
        "tenant_id": new.tenant_id, "run_id": new.run_id, "flow": new.flow,
        "step": new.step, "idempotency_key": new.idempotency_key, "seq": ev.seq,
        "type": ev.type, "payload": ev.payload, "hash": ev.hash,
        "next_wake_at": new.next_wake_at, "now": new.now, "queue": new.queue,
        "blob_keys": keys, "blob_data": [new.blobs[k] for k in keys],
    }


def _signal_params(s: SignalRecord) -> dict[str, Any]:
    """Parameters of the ``send_signal`` query."""
    return {
        "tenant_id": s.tenant_id, "run_id": s.run_id, "signal_id": s.signal_id,
        "name": s.name, "payload": s.payload, "sender": s.sender,
        "created_at": s.created_at,
    }


def _schedule(row: tuple[Any, ...]) -> ScheduleRecord:
    return ScheduleRecord(
        row[0], row[1], row[2], row[3], row[4], bytes(row[5]), row[6], row[7], bool(row[8]),
        row[9], row[10], row[11],
    )


def _approver(row: tuple[Any, ...]) -> ApproverRecord:
    return ApproverRecord(row[0], row[1], row[2], tuple(row[3]), row[4], row[5])
