"""Leases and limits of :class:`~underway.store.postgres.PostgresStore`: claiming due runs
within the queues' limits, and circuit breakers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ...errors import ConflictError
from .. import limits
from .._sqlbase.leases import SQLLeases
from ..leases import eager_candidate
from ..records import Lease, NewRun, RunRecord, StartedRun
from ._connection import _Q, Connection, _run, _runner
from ._journal import _run_params
from ._pipelines import pipelined


class Leases(SQLLeases, Connection):
    """:class:`~underway.store.leases.LeaseStore` and
    :class:`~underway.store.limits.LimitStore` on PostgreSQL: claims skip rows other
    workers lock (``FOR UPDATE SKIP LOCKED``); a circuit decides in one statement."""

    def claim(
        self, *, owner: str, now: float, ttl: float, limit: int = 1,
        tenant_id: str | None = None, run_id: str | None = None,
        queues: list[str] | None = None, expire: Sequence[tuple[str, str, str]] = (),
    ) -> list[Lease]:
        """Lease due runs nobody holds, fairly across tenants, within the queues' limits;
        the dead holders' leases in ``expire`` end first, in the same transaction.

        Rows other workers are locking are skipped. Claims on a limited queue take turns on its
        ``queues`` row; claims on unlimited queues never wait for each other, and take
        one round trip (``claim_unlimited``). A claim told
        which run to take updates that row in one statement when its queue has no limits
        (it waits for a worker locking the row, then checks it again).
        """
        wanted = None if queues is None else list(queues)
        if tenant_id is not None and run_id is not None:
            # Told which run: the dead leases ended and its row leased (unless its queue
            # has limits) in one round trip, one implicit transaction.
            with self._pool.connection() as conn:
                with pipelined(conn):
                    if expire:
                        conn.cursor().executemany(_Q["expire_lease"], [
                            {"tenant_id": t, "run_id": r, "owner": o} for t, r, o in expire])
                    one = conn.execute(_Q["claim_run"], {
                        "owner": owner, "expires_at": now + ttl, "now": now,
                        "queues": wanted, "tenant_id": tenant_id, "run_id": run_id,
                    }, prepare=True)
                row = one.fetchone()
            if row is not None:
                return [Lease(tenant_id, run_id, owner, int(row[0]), now + ttl)]
            expire = ()
        elif not expire:
            unlimited = self._claim_unlimited(
                owner=owner, now=now, ttl=ttl, limit=limit, tenant_id=tenant_id,
                run_id=run_id, queues=wanted)
            if unlimited is not None:
                return unlimited
        with self._pool.connection() as conn, conn.transaction():
            if expire:
                conn.cursor().executemany(_Q["expire_lease"], [
                    {"tenant_id": t, "run_id": r, "owner": o} for t, r, o in expire])
            plan = self._plan(_runner(conn), wanted, now=now, limit=limit)
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
                _put_buckets(conn, plan)
        return leases

    def _claim_unlimited(
        self, *, owner: str, now: float, ttl: float, limit: int, tenant_id: str | None,
        run_id: str | None, queues: list[str] | None,
    ) -> list[Lease] | None:
        """A claim in one round trip when none of ``queues`` has limits (None: one has, and
        nothing was taken)."""
        with self._pool.connection() as conn:
            with pipelined(conn):
                limited = conn.execute(_Q["queues_limited"], {"queues": queues}, prepare=True)
                taken = conn.execute(_Q["claim_unlimited"], {
                    "owner": owner, "expires_at": now + ttl, "now": now, "queues": queues,
                    "tenant_id": tenant_id, "run_id": run_id, "full": [], "empty_queues": [],
                    "empty_tenants": [], "limit": limit, "window": limits.window(limit),
                }, prepare=True)
            found = limited.fetchone()
            rows = taken.fetchall()
        if found is None or found[0]:
            return None
        return [Lease(r[0], r[1], owner, int(r[2]), now + ttl)
                for r in sorted(rows, key=lambda r: int(r[3]))]

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create (or find) the run and lease it when a claim could.

        It takes one round trip (one implicit transaction). A run of a limited queue is leased
        in a second transaction that takes its turn on the queue's row, as a claim does.
        """
        params = {
            **_run_params(new), "owner": owner, "now": now, "expires_at": now + ttl,
            "queues": None if queues is None else list(queues), "limits_checked": False,
        }
        lease_query = _Q["lease_started_by_id" if new.idempotency_key is None
                         else "lease_started_by_key"]
        with self._pool.connection() as conn:
            with pipelined(conn):
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
                got = self._lease_limited(conn, run, params, lease_query)
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

    # -- circuits -----------------------------------------------------------------------
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
        self, conn: psycopg.Connection[Any], run: RunRecord, params: dict[str, Any],
        lease_query: str,
    ) -> tuple[Any, ...] | None:
        """Lease a started run of a limited queue as a claim would: in a transaction
        holding the queue's row, within its concurrency and rate limits (None: they say
        no, or the run is no longer free)."""
        with conn.transaction():
            plan = self._plan(_runner(conn), [run.queue], now=float(params["now"]), limit=1)
            if plan.configs:
                cand = limits.Candidate(run.tenant_id, run.run_id, run.queue,
                                        run.lease_token == 0)
                if not plan.admit([cand]):
                    return None
            got = conn.execute(lease_query, {**params, "limits_checked": True}).fetchone()
            if got is not None and plan.configs and plan.spent:
                _put_buckets(conn, plan)
            return got


def _put_buckets(conn: psycopg.Connection[Any], plan: limits.ClaimPlan) -> None:
    """Store the rate tokens the plan spent, in its queues' and tenants' order."""
    spent = sorted(plan.spent.items())
    conn.execute(_Q["put_buckets"], {
        "now": plan.now, "queues": [k[0] for k, _ in spent],
        "tenant_ids": [k[1] for k, _ in spent], "tokens": [t for _, t in spent],
    })
