"""Legal holds, retention's reads, blob deletion and the sweep log, as both SQL
dialects run them (purging a run differs by dialect)."""

from __future__ import annotations

from collections.abc import Sequence

from ..records import ForgottenRun, HoldRecord, PurgedRun, RunRecord, SweepRecord
from .dialect import SQLBase


class SQLRetention(SQLBase):
    """The shared part of :class:`~underway.store.holds.HoldStore` and
    :class:`~underway.store.retention.RetentionStore`."""

    # -- legal holds ----------------------------------------------------------------------
    def put_hold(self, rec: HoldRecord) -> bool:
        """Place a hold unless one stands on the target."""
        return self._count(
            "put_hold", tenant_id=rec.tenant_id, kind=rec.kind, target=rec.target,
            reason=rec.reason, by=rec.by, created_at=rec.created_at,
        ) == 1

    def release_hold(
        self, tenant_id: str, kind: str, target: str, *, by: str, at: float
    ) -> bool:
        """Lift a standing hold."""
        return self._count("release_hold", tenant_id=tenant_id, kind=kind, target=target,
                           by=by, at=at) == 1

    def list_holds(
        self, tenant_id: str | None = None, *, released: bool = False
    ) -> list[HoldRecord]:
        """Standing (and, with ``released``, lifted) holds."""
        return [HoldRecord(*r) for r in self._all("list_holds", tenant_id=tenant_id,
                                                  released=released)]

    # -- purges -----------------------------------------------------------------------------
    def retention_candidates(
        self, tenant_id: str, *, status: str, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """Final runs past a time, not purged, oldest first."""
        rows = self._all(
            "retention_candidates", tenant_id=tenant_id, status=status,
            ended_before=ended_before, flow=flow, after_at=after[0] if after else None,
            after_id=after[1] if after else None, limit=limit,
        )
        return [self._run(r) for r in rows]

    def purged_runs(
        self, tenant_id: str, *, sweep_id: str | None = None, run_id: str | None = None,
        limit: int = 100,
    ) -> list[PurgedRun]:
        """Purges, newest first."""
        return [PurgedRun(r[0], r[1], r[2], float(r[3]), int(r[4]), r[5])
                for r in self._all("purged_runs", tenant_id=tenant_id, sweep_id=sweep_id,
                                   run_id=run_id, limit=limit)]

    # -- forgetting ---------------------------------------------------------------------------
    FORGET_TABLES = ("events", "checkpoints", "checkpoint_history", "signals", "run_labels",
                     "span_exports", "stream_deltas", "purged_runs", "runs")
    """What forgetting a run deletes its rows from (its ``forget_<table>`` queries), the
    runs row last."""

    def forget_candidates(
        self, tenant_id: str, *, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """Purged runs that ended before a time, oldest first."""
        rows = self._all(
            "forget_candidates", tenant_id=tenant_id, ended_before=ended_before, flow=flow,
            after_at=after[0] if after else None, after_id=after[1] if after else None,
            limit=limit,
        )
        return [self._run(r) for r in rows]

    def forgotten_runs(
        self, tenant_id: str, *, after: int = 0, sweep_id: str | None = None,
        limit: int = 1000,
    ) -> list[ForgottenRun]:
        """The tenant's forget log after a line, in order."""
        return [ForgottenRun(r[0], int(r[1]), r[2], int(r[3]), bytes(r[4]).hex(), r[5],
                             float(r[6]), bytes(r[7]).hex())
                for r in self._all("forgotten_runs", tenant_id=tenant_id, after=after,
                                   sweep_id=sweep_id, limit=limit)]

    # -- blobs ------------------------------------------------------------------------------
    def blob_keys(self, tenant_id: str, *, after: str | None = None,
                  limit: int = 1000) -> list[str]:
        """Blob keys in order."""
        return [r[0] for r in self._all("blob_keys", tenant_id=tenant_id, after=after,
                                        limit=limit)]

    def delete_blobs(self, tenant_id: str, keys: Sequence[str], *, idle: float) -> int:
        """Delete the blobs not written lately."""
        if not keys:
            return 0
        deleted = self._count("delete_blobs", tenant_id=tenant_id, keys=self._array(keys),
                              idle=idle)
        self._count("delete_loose_chunks", tenant_id=tenant_id, idle=idle)
        return deleted

    # -- the sweep log ------------------------------------------------------------------------
    def record_sweep(self, rec: SweepRecord) -> None:
        """Write a sweep's entry."""
        self._count(
            "record_sweep", sweep_id=rec.sweep_id, tenant_id=rec.tenant_id,
            started_at=rec.started_at, by=rec.by, finished_at=rec.finished_at,
            purged=rec.purged, held=rec.held, skipped=rec.skipped,
            blobs_deleted=rec.blobs_deleted, collected_at=rec.collected_at,
            forgotten=rec.forgotten,
        )

    def list_sweeps(self, tenant_id: str | None = None, *, limit: int = 20) -> list[SweepRecord]:
        """Sweeps, newest first."""
        return [SweepRecord(*r) for r in self._all("list_sweeps", tenant_id=tenant_id,
                                                   limit=limit)]
