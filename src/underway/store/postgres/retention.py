"""Legal holds, retention's purges and sweep log, and blob deletion of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

from collections.abc import Sequence

from ... import faults
from ...errors import ConflictError
from ..records import HoldRecord, Purge, PurgedRun, RunRecord, SweepRecord
from ..retention import PurgeResult, check_purge
from .connection import _Q, Connection, _run


class Retention(Connection):
    """:class:`~underway.store.holds.HoldStore` and
    :class:`~underway.store.retention.RetentionStore` on PostgreSQL."""

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
        return [_run(r) for r in rows]

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Tombstone every event, drop checkpoints and signals, clear the error and subject, record
        the purge: one transaction, or nothing."""
        key = {"tenant_id": purge.tenant_id, "run_id": purge.run_id}
        stones = purge.tombstones
        with self._pool.connection() as conn, conn.transaction():
            head = conn.execute(_Q["purge_head"], key).fetchone()
            if head is not None and head[3]:
                return "already"
            check_purge(purge, None if head is None else (
                str(head[0]), int(head[1]), int(head[4]), int(head[5])))
            assert head is not None  # check_purge refuses a run that is gone
            if head[2]:
                return "held"
            changed = conn.execute(_Q["tombstone_events"], {
                **key, "seqs": [e.seq for e in stones], "types": [e.type for e in stones],
                "payloads": [e.payload for e in stones], "hashes": [e.hash for e in stones],
            }).rowcount
            if changed != len(stones):
                # Raising rolls the transaction back: nothing is purged.
                raise ConflictError(f"run {purge.run_id}: an event changed since it was "
                                    "read; nothing was purged")
            faults.point("retention.purge_uncommitted")
            conn.execute(_Q["delete_checkpoints_of_run"], key)
            conn.execute(_Q["delete_signals_of_run"], key)
            conn.execute(_Q["clear_run_fields"], key)
            conn.execute(_Q["insert_purged_run"], {
                **key, "sweep_id": purge.sweep_id, "at": purge.at, "events": len(stones),
                "rule": purge.rule,
            })
        return "purged"

    def purged_runs(
        self, tenant_id: str, *, sweep_id: str | None = None, run_id: str | None = None,
        limit: int = 100,
    ) -> list[PurgedRun]:
        """Purges, newest first."""
        return [PurgedRun(r[0], r[1], r[2], float(r[3]), int(r[4]), r[5])
                for r in self._all("purged_runs", tenant_id=tenant_id, sweep_id=sweep_id,
                                   run_id=run_id, limit=limit)]

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
        return self._count("delete_blobs", tenant_id=tenant_id, keys=list(keys), idle=idle)

    # -- the sweep log ------------------------------------------------------------------------
    def record_sweep(self, rec: SweepRecord) -> None:
        """Write a sweep's entry."""
        self._count(
            "record_sweep", sweep_id=rec.sweep_id, tenant_id=rec.tenant_id,
            started_at=rec.started_at, by=rec.by, finished_at=rec.finished_at,
            purged=rec.purged, held=rec.held, skipped=rec.skipped,
            blobs_deleted=rec.blobs_deleted, collected_at=rec.collected_at,
        )

    def list_sweeps(self, tenant_id: str | None = None, *, limit: int = 20) -> list[SweepRecord]:
        """Sweeps, newest first."""
        return [SweepRecord(*r) for r in self._all("list_sweeps", tenant_id=tenant_id,
                                                   limit=limit)]
