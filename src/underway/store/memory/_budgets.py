"""The in-memory store's budget ledger (:class:`~underway.store.budgets.BudgetStore`):
holds applied under one lock."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ..budgets import KEEP_DAYS, UNSEEDED, Outcome, apply_hold

_DAY = 86_400.0


class MemoryBudgets:
    """Tenants' daily holds held in process memory."""

    def __init__(self) -> None:
        self._budget_lock = threading.Lock()
        self._budget_used: dict[tuple[str, float], dict[str, float]] = {}
        self._budget_holds: dict[tuple[str, str], tuple[float, dict[str, float]]] = {}

    def reserve_budget(
        self, tenant_id: str, since: float, key: str, amounts: Mapping[str, float],
        limits: Mapping[str, float], *, baseline: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Reserve ``amounts`` for ``key`` unless a limit would be crossed."""
        with self._budget_lock:
            used = self._budget_used.get((tenant_id, since))
            if used is None:
                if baseline is None:
                    return UNSEEDED
                self._forget(tenant_id, since - KEEP_DAYS * _DAY)
                used = self._budget_used[(tenant_id, since)] = dict(baseline)
            held = self._budget_holds.get((tenant_id, key))
            old = held[1] if held is not None and held[0] == since else {}
            refused = apply_hold(used, old, amounts, limits)
            if refused is None:
                self._budget_holds[(tenant_id, key)] = (since, dict(amounts))
            return refused

    def settle_budget(self, tenant_id: str, key: str, amounts: Mapping[str, float]) -> None:
        """Replace the hold of ``key`` with what the call spent."""
        with self._budget_lock:
            held = self._budget_holds.get((tenant_id, key))
            if held is None:
                return
            used = self._budget_used.get((tenant_id, held[0]))
            if used is not None:
                apply_hold(used, held[1], amounts, None)
            self._budget_holds[(tenant_id, key)] = (held[0], dict(amounts))

    def budget_used(self, tenant_id: str, since: float) -> dict[str, float] | None:
        """What the tenant's day holds (None: never seeded)."""
        with self._budget_lock:
            used = self._budget_used.get((tenant_id, since))
            return None if used is None else dict(used)

    def _forget(self, tenant_id: str, before: float) -> None:
        for k in [k for k in self._budget_used if k[0] == tenant_id and k[1] < before]:
            del self._budget_used[k]
        for hold, (since, _) in list(self._budget_holds.items()):
            if hold[0] == tenant_id and since < before:
                del self._budget_holds[hold]
