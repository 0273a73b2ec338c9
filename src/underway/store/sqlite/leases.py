"""Leases and limits of :class:`~underway.store.sqlite.SQLiteStore`: claiming due runs
within the queues' limits, and circuit breakers."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time

from .. import limits
from ..leases import MAX_LEASE_TTL, eager_candidate
from ..records import Lease, NewRun, QueueConfig, RowRepair, StartedRun
from .connection import _Q, Connection
from .journal import _create_run


class Leases(Connection):
    """:class:`~underway.store.leases.LeaseStore` and
    :class:`~underway.store.limits.LimitStore` on SQLite."""

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

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create (or find) the run and lease it when a claim could, in one transaction."""
        with self._tx() as c:
            run, created = _create_run(c, new)
            cand = eager_candidate(run, now=now, queues=queues)
            if cand is None or not _admitted(c, cand, now):
                return StartedRun(run, created, None, False)
            token = int(c.execute(
                _Q["take_lease"], (owner, now + ttl, run.tenant_id, run.run_id)
            ).fetchone()[0])
            inbox = c.execute(_Q["has_signals"], (run.tenant_id, run.run_id)).fetchone()
        lease = Lease(run.tenant_id, run.run_id, owner, token, now + ttl)
        leased = dataclasses.replace(run, lease_owner=owner, lease_token=token,
                                     lease_expires_at=now + ttl)
        return StartedRun(leased, created, lease, inbox is not None)

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

    def suspect_runs(self, *, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """Rows the journal likely contradicts (see the protocol)."""
        rows = self._query_named("suspect_runs", now=now, horizon=now + MAX_LEASE_TTL,
                                 limit=limit)
        return [(r[0], r[1]) for r in rows]

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Rewrite a row from its journal while it is as it was read."""
        with self._tx() as c:
            return c.execute(_Q["repair_run"], repair.params(now)).rowcount == 1

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """Earliest due time of an unfinished, unheld run of the queues."""
        wanted = None if queues is None else json.dumps(list(queues))
        with self._lock:
            row = self._conn.execute(
                _Q["next_due_at"], {"now": now, "queues": wanted}
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def next_wake_at(self) -> float | None:
        """Earliest due time of unfinished runs."""
        value = self._query("next_wake_at")[0][0]
        return None if value is None else float(value)

    # -- limits -------------------------------------------------------------------------
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


def _admitted(c: sqlite3.Connection, cand: limits.Candidate, now: float) -> bool:
    """Whether the limits of the candidate's queue admit it, in the open transaction (a
    rate-limited first activation spends its token here)."""
    configs = limits.limited(
        QueueConfig(r[0], r[1], r[2], r[3], bool(r[4]))
        for r in c.execute(_Q["queue_limits"], {"queues": json.dumps([cand.queue])})
    )
    if not configs:
        return True
    names = json.dumps([cand.queue])
    leased = {r[0]: int(r[1])
              for r in c.execute(_Q["leased_per_queue"], {"queues": names, "now": now})}
    buckets = {(r[0], r[1]): limits.Bucket(r[2], r[3])
               for r in c.execute(_Q["queue_buckets"], {"queues": names})}
    plan = limits.ClaimPlan(configs, leased, buckets, now=now, limit=1)
    if not plan.admit([cand]):
        return False
    c.executemany(
        _Q["put_bucket"], [(q, t, tokens, now) for (q, t), tokens in plan.spent.items()]
    )
    return True

