"""The budget ledger of :class:`~underway.store.postgres.PostgresStore`: each reservation
in one transaction holding the tenant's day row (``FOR UPDATE``), so reservations of one
tenant from any number of workers take turns."""

from __future__ import annotations

import json
from collections.abc import Mapping

from .._sqlbase.budgets import DAY, SQLBudgets
from ..budgets import KEEP_DAYS, UNSEEDED, Outcome, apply_hold
from ._connection import _Q, Connection


class Budgets(SQLBudgets, Connection):
    """:class:`~underway.store.budgets.BudgetStore` on PostgreSQL."""

    def reserve_budget(
        self, tenant_id: str, since: float, key: str, amounts: Mapping[str, float],
        limits: Mapping[str, float], *, baseline: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Reserve ``amounts`` for ``key`` unless a limit would be crossed."""
        day = {"tenant_id": tenant_id, "since": since}
        with self._pool.connection() as conn, conn.transaction():
            # No wait for the WAL flush: the call's intent commits after this, on the same
            # server, and its flush covers this earlier record. An intent that never
            # commits never runs its call, so a reservation lost with it costs nothing.
            conn.execute("SET LOCAL synchronous_commit TO OFF")
            if baseline is not None and conn.execute(
                    _Q["budget_seed"], {**day, "used": json.dumps(dict(baseline))}).rowcount:
                before = {"tenant_id": tenant_id, "before": since - KEEP_DAYS * DAY}
                conn.execute(_Q["budget_forget_holds"], before)
                conn.execute(_Q["budget_forget_used"], before)
            row = conn.execute(_Q["budget_lock_used"], day).fetchone()
            if row is None:
                return UNSEEDED
            used = json.loads(row[0])
            held = conn.execute(_Q["budget_hold"], {"tenant_id": tenant_id, "key": key}
                                ).fetchone()
            old = json.loads(held[1]) if held is not None and held[0] == since else {}
            refused = apply_hold(used, old, amounts, limits)
            if refused is not None:
                return refused
            conn.execute(_Q["budget_put_used"], {**day, "used": json.dumps(used)})
            conn.execute(_Q["budget_put_hold"], {**day, "key": key,
                                                 "amounts": json.dumps(dict(amounts))})
            return None

    def settle_budget(self, tenant_id: str, key: str, amounts: Mapping[str, float]) -> None:
        """Replace the hold of ``key`` with what the call spent."""
        with self._pool.connection() as conn, conn.transaction():
            # A settle lost in a server crash leaves the hold as reserved: the safe side.
            conn.execute("SET LOCAL synchronous_commit TO OFF")
            held = conn.execute(_Q["budget_hold"], {"tenant_id": tenant_id, "key": key}
                                ).fetchone()
            if held is None:
                return
            day = {"tenant_id": tenant_id, "since": float(held[0])}
            row = conn.execute(_Q["budget_lock_used"], day).fetchone()
            if row is not None:
                used = json.loads(row[0])
                apply_hold(used, json.loads(held[1]), amounts, None)
                conn.execute(_Q["budget_put_used"], {**day, "used": json.dumps(used)})
            conn.execute(_Q["budget_put_hold"], {**day, "key": key,
                                                 "amounts": json.dumps(dict(amounts))})
