"""Leases' single statements, due times and queue limits, as both SQL dialects run
them (claiming and circuits differ by dialect)."""

from __future__ import annotations

import time
from typing import Any

from .. import limits
from ..leases import MAX_LEASE_TTL
from ..records import Lease, QueueConfig, RowRepair
from .dialect import Run, SQLBase


class SQLLeases(SQLBase):
    """The shared part of :class:`~underway.store.leases.LeaseStore` and
    :class:`~underway.store.limits.LimitStore`."""

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a held lease."""
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

    def suspect_runs(
        self, *, now: float, limit: int = 100, since: float | None = None,
    ) -> list[tuple[str, str]]:
        """Rows the journal likely contradicts (see the protocol).

        Args:
            now: The time leases and wake times are judged at.
            limit: How many rows at most, in (tenant, run) order.
            since: Check only the rows written at or after this time (None: every row).
        """
        horizon = now + MAX_LEASE_TTL
        rows = self._all("suspect_runs", now=now, horizon=horizon, limit=limit) \
            if since is None else self._all("suspect_runs_since", now=now, horizon=horizon,
                                            limit=limit, since=since)
        return [(r[0], r[1]) for r in rows]

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Rewrite a row from its journal while it is as it was read."""
        return self._count("repair_run", **repair.params(now)) == 1

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """Earliest due time of an unfinished, unheld run of the queues."""
        rows = self._all("next_due_at", now=now,
                         queues=None if queues is None else self._array(queues))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    def next_wake_at(self) -> float | None:
        """Earliest due time of unfinished runs."""
        rows = self._all("next_wake_at")
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    # -- limits -------------------------------------------------------------------------
    def set_queue(self, config: QueueConfig) -> None:
        """Create or replace a queue's limits; its rate buckets start full."""
        q = config
        with self._transaction() as run:
            run("set_queue", name=q.name, max_concurrency=q.max_concurrency,
                rate_limit=q.rate_limit, rate_period_s=q.rate_period_s,
                per_tenant=q.per_tenant, now=time.time())
            run("reset_queue_buckets", name=q.name)

    def list_queues(self) -> list[QueueConfig]:
        """Every configured queue."""
        return [QueueConfig(r[0], r[1], r[2], r[3], bool(r[4]))
                for r in self._all("list_queues")]

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits."""
        with self._transaction() as run:
            run("reset_queue_buckets", name=name)
            return run("delete_queue", name=name).rowcount == 1

    def _plan(self, run: Run, queues: Any, *, now: float, limit: int) -> limits.ClaimPlan:
        """The limits of ``queues`` (bound, None: all) as a claim sees them, read in its
        open transaction; leases and buckets are read only when a queue is limited."""
        configs = limits.limited(
            QueueConfig(r[0], r[1], r[2], r[3], bool(r[4]))
            for r in run("queue_limits", queues=queues).fetchall()
        )
        leased: dict[str, int] = {}
        buckets: dict[limits.BucketKey, limits.Bucket] = {}
        if configs:
            names = self._array(sorted(configs))
            leased = {r[0]: int(r[1]) for r in
                      run("leased_per_queue", queues=names, now=now).fetchall()}
            buckets = {(r[0], r[1]): limits.Bucket(r[2], r[3]) for r in
                       run("queue_buckets", queues=names).fetchall()}
        return limits.ClaimPlan(configs, leased, buckets, now=now, limit=limit)
