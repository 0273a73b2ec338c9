"""Reading the budget ledger, as both SQL dialects run it (reserving and settling lock
differently by dialect)."""

from __future__ import annotations

import json

from .dialect import SQLBase

DAY = 86_400.0
"""Seconds in a day: how far back ``KEEP_DAYS`` reaches."""


class SQLBudgets(SQLBase):
    """The shared part of :class:`~underway.store.budgets.BudgetStore`."""

    def budget_used(self, tenant_id: str, since: float) -> dict[str, float] | None:
        """What the tenant's day holds (None: never seeded)."""
        rows = self._all("budget_used", tenant_id=tenant_id, since=since)
        return None if not rows else dict(json.loads(rows[0][0]))
