"""The budget ledger role: what each tenant has reserved against its budget, per UTC day.

The guard reserves a call's amounts here before the call's intent commits. A reservation
is a conditional write: it adds the amounts to the tenant's day only when no limit is
crossed, in one transaction that holds the tenant's row. So no interleaving of workers,
processes or activations can cross a limit.

Each reservation is a hold named by the call's idempotency key. Reserving the same key
again replaces its hold, so a re-run after a crash or a retry counts the call once. A
hold is settled to what the call spent once its outcome is known, and released (settled
to nothing) when the journal says the call did not take effect. A crash leaves the hold
in place: an unknown outcome keeps its reservation.

A tenant's day starts empty of holds: its first reservation seeds it with the usage the
journal holds for that day (``baseline``), so a deploy mid-day loses nothing. The
arithmetic of holds lives here once; every backend applies it in its own transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["UNSEEDED", "BudgetStore", "Outcome", "Refused", "over"]

KEEP_DAYS = 2
"""Days of holds kept before the current one; older ones are dropped when a day is seeded."""

TOLERANCE = 1e-9
"""Relative slack when comparing sums of floats with a limit, so that 0.1 + 0.2 spent
against a limit of 0.3 counts as at the limit, not over it."""

UNSEEDED: Literal["unseeded"] = "unseeded"
"""What :meth:`BudgetStore.reserve_budget` answers when the day has no row yet and no
``baseline`` was given: read the journal's usage and reserve again with it."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A reservation turned down: ``metric`` would reach ``used``, over ``limit``."""

    metric: str
    limit: float
    used: float


Outcome = Refused | Literal["unseeded"] | None
"""None: reserved; :class:`Refused`: a limit would be crossed; :data:`UNSEEDED`: seed the
day first."""


class BudgetStore(Protocol):
    """Holds against tenants' daily budgets, reserved and settled atomically."""

    def reserve_budget(
        self, tenant_id: str, since: float, key: str, amounts: Mapping[str, float],
        limits: Mapping[str, float], *, baseline: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Reserve ``amounts`` for call ``key`` in the tenant's day starting at ``since``.

        Args:
            tenant_id: The tenant whose day is charged.
            since: The day's start (epoch seconds, 00:00 UTC).
            key: The call's idempotency key; a hold of the same key is replaced.
            amounts: What the call adds, by metric (``tool_calls``, ``money.INR``...).
            limits: The caps that apply, by metric; a metric not named is not capped.
            baseline: The journal's usage of the day, used only when the day has no row.
        """
        ...

    def settle_budget(self, tenant_id: str, key: str, amounts: Mapping[str, float]) -> None:
        """Replace the hold of call ``key`` with what it spent (``{}``: release it).

        Settling never refuses: it records what happened. A key with no hold is ignored.

        Args:
            tenant_id: The tenant of the call.
            key: The call's idempotency key.
            amounts: What the call spent, by metric.
        """
        ...

    def budget_used(self, tenant_id: str, since: float) -> dict[str, float] | None:
        """What the tenant's day holds, by metric (None: the day was never seeded).

        Args:
            tenant_id: The tenant.
            since: The day's start (epoch seconds, 00:00 UTC).
        """
        ...


def over(used: float, limit: float) -> bool:
    """Whether ``used`` goes past ``limit`` (reaching it exactly is allowed)."""
    return used - limit > TOLERANCE * max(1.0, abs(limit))


def apply_hold(
    used: dict[str, float], old: Mapping[str, float], new: Mapping[str, float],
    limits: Mapping[str, float] | None,
) -> Refused | None:
    """Replace hold ``old`` by ``new`` in ``used``, unless a limit is crossed.

    Only a metric that grows is checked: releasing or settling lower never refuses.
    ``used`` is changed only when the hold goes in.

    Args:
        used: The day's usage by metric; updated in place.
        old: The hold being replaced (``{}``: none).
        new: The hold to put in its place.
        limits: The caps to check (None: settle, check nothing).
    """
    after = dict(used)
    for metric in set(old) | set(new):
        after[metric] = after.get(metric, 0.0) + new.get(metric, 0.0) - old.get(metric, 0.0)
    for metric, cap in sorted((limits or {}).items()):
        grows = new.get(metric, 0.0) - old.get(metric, 0.0) > 0
        if grows and over(after.get(metric, 0.0), cap):
            return Refused(metric, float(cap), after.get(metric, 0.0))
    used.clear()
    used.update(after)
    return None
