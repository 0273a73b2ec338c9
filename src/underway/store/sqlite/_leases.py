"""Leases and limits of :class:`~underway.store.sqlite.SQLiteStore`: claiming due runs
within the queues' limits, and circuit breakers."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence

from .. import limits
from .._sqlbase.leases import SQLLeases
from ..leases import eager_candidate
from ..records import Lease, NewRun, StartedRun
from ._connection import _Q, Connection, _runner
from ._journal import _create_run


class Leases(SQLLeases, Connection):
    """:class:`~underway.store.leases.LeaseStore` and
    :class:`~underway.store.limits.LimitStore` on SQLite: a claim, a start and a circuit's
    decision each in one ``BEGIN IMMEDIATE`` transaction."""

    def claim(
        self, *, owner: str, now: float, ttl: float, limit: int = 1,
        tenant_id: str | None = None, run_id: str | None = None,
        queues: list[str] | None = None, expire: Sequence[tuple[str, str, str]] = (),
    ) -> list[Lease]:
        """Lease due runs nobody holds, fairly across tenants, within the queues' limits;
        the dead holders' leases in ``expire`` end first, in the same transaction."""
        wanted = None if queues is None else self._array(queues)
        with self._tx() as c:
            if expire:
                c.executemany(_Q["expire_lease"], [
                    {"tenant_id": t, "run_id": r, "owner": o} for t, r, o in expire])
            if tenant_id is not None and run_id is not None:
                # Told which run: one statement on its row, unless its queue has limits.
                row = c.execute(_Q["claim_run"], {
                    "owner": owner, "expires_at": now + ttl, "now": now, "queues": wanted,
                    "tenant_id": tenant_id, "run_id": run_id}).fetchone()
                if row is not None:
                    return [Lease(tenant_id, run_id, owner, int(row[0]), now + ttl)]
            plan = self._plan(_runner(c), wanted, now=now, limit=limit)
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
            if cand is None or not self._admitted(c, cand, now):
                return StartedRun(run, created, None, False)
            token = int(c.execute(
                _Q["take_lease"], (owner, now + ttl, run.tenant_id, run.run_id)
            ).fetchone()[0])
            inbox = c.execute(_Q["has_signals"], (run.tenant_id, run.run_id)).fetchone()
        lease = Lease(run.tenant_id, run.run_id, owner, token, now + ttl)
        leased = dataclasses.replace(run, lease_owner=owner, lease_token=token,
                                     lease_expires_at=now + ttl)
        return StartedRun(leased, created, lease, inbox is not None)

    # -- circuits -----------------------------------------------------------------------
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

    def _admitted(self, c: sqlite3.Connection, cand: limits.Candidate, now: float) -> bool:
        """Whether the limits of the candidate's queue admit it, in the open transaction
        (a rate-limited first activation spends its token here)."""
        plan = self._plan(_runner(c), self._array([cand.queue]), now=now, limit=1)
        if not plan.configs:
            return True
        if not plan.admit([cand]):
            return False
        c.executemany(
            _Q["put_bucket"], [(q, t, tokens, now) for (q, t), tokens in plan.spent.items()]
        )
        return True
