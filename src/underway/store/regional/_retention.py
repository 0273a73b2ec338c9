"""Legal holds and retention on a :class:`~underway.store.regional.RegionalStore`: each
tenant's holds, purges, sweep log and blobs in its region's database; listings of every
tenant are the union of the regions'."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..base import Store
from ..records import Forget, ForgottenRun, HoldRecord, Purge, PurgedRun, RunRecord, SweepRecord
from ..retention import ForgetResult, PurgeResult


class RegionalRetention:
    """The :class:`~underway.store.holds.HoldStore` and
    :class:`~underway.store.retention.RetentionStore` of a regional store, routed by
    tenant."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

    def put_hold(self, rec: HoldRecord) -> bool:
        """Place a hold in its tenant's region."""
        return self._of(rec.tenant_id).put_hold(rec)

    def release_hold(
        self, tenant_id: str, kind: str, target: str, *, by: str, at: float
    ) -> bool:
        """Lift a hold in the tenant's region."""
        return self._of(tenant_id).release_hold(tenant_id, kind, target, by=by, at=at)

    def list_holds(
        self, tenant_id: str | None = None, *, released: bool = False
    ) -> list[HoldRecord]:
        """Holds of the tenant (from its region), or of every region."""
        if tenant_id is not None:
            return self._of(tenant_id).list_holds(tenant_id, released=released)
        return sorted((h for s in self._all() for h in s.list_holds(released=released)),
                      key=lambda h: (h.tenant_id, h.kind, h.target))

    def retention_candidates(self, tenant_id: str, **query: Any) -> list[RunRecord]:
        """Runs to purge, from the tenant's region."""
        return self._of(tenant_id).retention_candidates(tenant_id, **query)

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Purge a run in its tenant's region."""
        return self._of(purge.tenant_id).purge_run(purge)

    def purged_runs(self, tenant_id: str, **query: Any) -> list[PurgedRun]:
        """The tenant's purges, from its region."""
        return self._of(tenant_id).purged_runs(tenant_id, **query)

    def forget_candidates(self, tenant_id: str, **query: Any) -> list[RunRecord]:
        """Purged runs to forget, from the tenant's region."""
        return self._of(tenant_id).forget_candidates(tenant_id, **query)

    def forget_run(self, forget: Forget) -> ForgetResult:
        """Forget a run in its tenant's region."""
        return self._of(forget.tenant_id).forget_run(forget)

    def forgotten_runs(self, tenant_id: str, **query: Any) -> list[ForgottenRun]:
        """The tenant's forget log, from its region."""
        return self._of(tenant_id).forgotten_runs(tenant_id, **query)

    def blob_keys(self, tenant_id: str, *, after: str | None = None,
                  limit: int = 1000) -> list[str]:
        """The tenant's blob keys, from its region."""
        return self._of(tenant_id).blob_keys(tenant_id, after=after, limit=limit)

    def delete_blobs(self, tenant_id: str, keys: Sequence[str], *, idle: float) -> int:
        """Delete the tenant's blobs in its region."""
        return self._of(tenant_id).delete_blobs(tenant_id, keys, idle=idle)

    def record_sweep(self, rec: SweepRecord) -> None:
        """Write a sweep's entry in its tenant's region."""
        self._of(rec.tenant_id).record_sweep(rec)

    def list_sweeps(self, tenant_id: str | None = None, *, limit: int = 20) -> list[SweepRecord]:
        """Sweeps of the tenant (from its region), or of every region, newest first."""
        if tenant_id is not None:
            return self._of(tenant_id).list_sweeps(tenant_id, limit=limit)
        found = [r for s in self._all() for r in s.list_sweeps(limit=limit)]
        return sorted(found, key=lambda r: (-r.started_at, r.sweep_id, r.tenant_id))[:limit]
