"""Leases and limits of :class:`~underway.store.postgres.PostgresStore`: claiming due runs
within the queues' limits, and circuit breakers."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from ...errors import ConflictError
from .. import limits
from ..leases import MAX_LEASE_TTL, eager_candidate
from ..records import Lease, NewRun, QueueConfig, RowRepair, RunRecord, StartedRun
from .connection import _Q, Connection, _run
from .journal import _run_params


class Leases(Connection):
    """:class:`~underway.store.leases.LeaseStore` and
    :class:`~underway.store.limits.LimitStore` on PostgreSQL."""

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

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create (or find) the run and lease it when a claim could, in one round trip
        (one implicit transaction); a run of a limited queue is leased in a second
        transaction that takes its turn on the queue's row, as a claim does."""
        params = {
            **_run_params(new), "owner": owner, "now": now, "expires_at": now + ttl,
            "queues": None if queues is None else list(queues), "limits_checked": False,
        }
        lease_query = _Q["lease_started_by_id" if new.idempotency_key is None
                         else "lease_started_by_key"]
        with self._pool.connection() as conn:
            with conn.pipeline():
                created = conn.execute(_Q["create_run"], params, prepare=True)
                existing = (
                    conn.execute(_Q["find_by_idempotency"], params, prepare=True)
                    if new.idempotency_key is not None else None
                )
                leased = conn.execute(lease_query, params, prepare=True)
            row = created.fetchone()
            run = _run(row) if row is not None else None
            if run is None and existing is not None:
                found = existing.fetchone()
                run = None if found is None else _run(found)
            got = leased.fetchone()
            if run is None:
                # No run created and none found by the key: the id is taken. Only a
                # repeat of this very start (its first event already stored) was leased.
                if got is not None:
                    conn.execute(_Q["release_lease"], {
                        "tenant_id": new.tenant_id, "run_id": new.run_id, "owner": owner,
                        "token": got[12]})
                raise ConflictError(
                    f"run {new.run_id} already exists in tenant {new.tenant_id}")
            if got is None and eager_candidate(run, now=now, queues=queues) is not None:
                got = _lease_limited(conn, run, params, lease_query)
            if got is None:
                conn.execute(_Q["notify_run"], {"tenant_id": run.tenant_id,
                                                "run_id": run.run_id}, prepare=True)
                return StartedRun(run, row is not None, None, False)
        leased_run = _run(got[:-1])
        return StartedRun(
            leased_run, row is not None,
            Lease(leased_run.tenant_id, leased_run.run_id, owner,
                  leased_run.lease_token, now + ttl),
            bool(got[-1]),
        )

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

    def suspect_runs(self, *, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """Rows the journal likely contradicts (see the protocol)."""
        rows = self._all("suspect_runs", now=now, horizon=now + MAX_LEASE_TTL, limit=limit)
        return [(r[0], r[1]) for r in rows]

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Rewrite a row from its journal while it is as it was read."""
        return self._count("repair_run", **repair.params(now)) == 1

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """Earliest due time of an unfinished, unheld run of the queues."""
        rows = self._all("next_due_at", now=now, queues=None if queues is None else list(queues))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def next_wake_at(self) -> float | None:
        """Earliest due time of unfinished runs."""
        rows = self._all("next_wake_at")
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    # -- limits -------------------------------------------------------------------------
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


def _lease_limited(
    conn: psycopg.Connection[Any], run: RunRecord, params: dict[str, Any], lease_query: str
) -> tuple[Any, ...] | None:
    """Lease a started run of a limited queue as a claim would: in a transaction holding
    the queue's row, within its concurrency and rate limits (None: they say no, or the run
    is no longer free)."""
    now = float(params["now"])
    with conn.transaction():
        configs = limits.limited(
            QueueConfig(*r)
            for r in conn.execute(_Q["queue_limits"], {"queues": [run.queue]})
        )
        plan = None
        if configs:
            names = [run.queue]
            leased = {r[0]: int(r[1]) for r in conn.execute(
                _Q["leased_per_queue"], {"queues": names, "now": now})}
            buckets = {(r[0], r[1]): limits.Bucket(r[2], r[3]) for r in conn.execute(
                _Q["queue_buckets"], {"queues": names})}
            plan = limits.ClaimPlan(configs, leased, buckets, now=now, limit=1)
            cand = limits.Candidate(run.tenant_id, run.run_id, run.queue,
                                    run.lease_token == 0)
            if not plan.admit([cand]):
                return None
        got = conn.execute(lease_query, {**params, "limits_checked": True}).fetchone()
        if got is not None and plan is not None and plan.spent:
            spent = sorted(plan.spent.items())
            conn.execute(_Q["put_buckets"], {
                "now": now, "queues": [k[0] for k, _ in spent],
                "tenant_ids": [k[1] for k, _ in spent], "tokens": [t for _, t in spent],
            })
        return got
