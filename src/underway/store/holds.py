"""The legal holds role: holds on a run or on every run about a data subject, which stop
every retention purge of what they hold until they are released. A released hold stays
on record (who lifted it and when)."""

from __future__ import annotations

from typing import Protocol

from .records import HoldRecord

__all__ = ["HoldStore"]


class HoldStore(Protocol):
    """Places, releases and lists legal holds."""

    def put_hold(self, rec: HoldRecord) -> bool:
        """Place the hold; False (and nothing changed) when the same target of the tenant
        is already held. A released hold on it is replaced by this one."""
        ...

    def release_hold(
        self, tenant_id: str, kind: str, target: str, *, by: str, at: float
    ) -> bool:
        """Lift the tenant's standing hold on ``target``.

        Args:
            tenant_id: The hold's tenant.
            kind: What ``target`` is: ``run`` or ``subject``.
            target: The run id or the data subject held.
            by: Who lifts the hold.
            at: When it is lifted.

        Returns:
            False when there is no standing hold on ``target``.
        """
        ...

    def list_holds(
        self, tenant_id: str | None = None, *, released: bool = False
    ) -> list[HoldRecord]:
        """The standing holds of ``tenant_id`` (every tenant when None), with the released
        ones too when ``released``, sorted by tenant, kind and target."""
        ...
