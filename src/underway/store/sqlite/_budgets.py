"""The budget ledger of :class:`~underway.store.sqlite.SQLiteStore`: each reservation in
one ``BEGIN IMMEDIATE`` transaction, which every other writer of the file waits for."""

from __future__ import annotations

import json
from collections.abc import Mapping

from .._sqlbase.budgets import DAY, SQLBudgets
from ..budgets import KEEP_DAYS, UNSEEDED, Outcome, apply_hold
from ._connection import _Q, Connection


class Budgets(SQLBudgets, Connection):
    """:class:`~underway.store.budgets.BudgetStore` on SQLite."""

    def reserve_budget(
        self, tenant_id: str, since: float, key: str, amounts: Mapping[str, float],
        limits: Mapping[str, float], *, baseline: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Reserve ``amounts`` for ``key`` unless a limit would be crossed."""
        with self._tx() as c:
            row = c.execute(
                _Q["budget_used"], {"tenant_id": tenant_id, "since": since}).fetchone()
            if row is None:
                if baseline is None:
                    return UNSEEDED
                before = since - KEEP_DAYS * DAY
                c.execute(_Q["budget_forget_holds"], (tenant_id, before))
                c.execute(_Q["budget_forget_used"], (tenant_id, before))
                used = dict(baseline)
                c.execute(_Q["budget_seed"], (tenant_id, since, json.dumps(used)))
            else:
                used = json.loads(row[0])
            held = c.execute(_Q["budget_hold"], (tenant_id, key)).fetchone()
            old = json.loads(held[1]) if held is not None and held[0] == since else {}
            refused = apply_hold(used, old, amounts, limits)
            if refused is not None:
                return refused
            c.execute(_Q["budget_put_used"], (json.dumps(used), tenant_id, since))
            c.execute(_Q["budget_put_hold"], (tenant_id, key, since, json.dumps(dict(amounts))))
            return None

    def settle_budget(self, tenant_id: str, key: str, amounts: Mapping[str, float]) -> None:
        """Replace the hold of ``key`` with what the call spent."""
        with self._tx() as c:
            held = c.execute(_Q["budget_hold"], (tenant_id, key)).fetchone()
            if held is None:
                return
            since = float(held[0])
            row = c.execute(
                _Q["budget_used"], {"tenant_id": tenant_id, "since": since}).fetchone()
            if row is not None:
                used = json.loads(row[0])
                apply_hold(used, json.loads(held[1]), amounts, None)
                c.execute(_Q["budget_put_used"], (json.dumps(used), tenant_id, since))
            c.execute(_Q["budget_put_hold"], (tenant_id, key, since, json.dumps(dict(amounts))))
