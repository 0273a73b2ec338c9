"""Legal holds, retention's purges and sweep log, and blob deletion of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ... import faults
from ...errors import ConflictError
from ..records import HoldRecord, Purge, PurgedRun, RunRecord, SweepRecord
from ..retention import PurgeResult, check_purge
from .connection import _Q, Connection
from .journal import _run


class Retention(Connection):
    """:class:`~underway.store.holds.HoldStore` and
    :class:`~underway.store.retention.RetentionStore` on SQLite."""

    # -- legal holds ----------------------------------------------------------------------
    def put_hold(self, rec: HoldRecord) -> bool:
        """Place a hold unless one stands on the target."""
        with self._tx() as c:
            return c.execute(_Q["put_hold"], (
                rec.tenant_id, rec.kind, rec.target, rec.reason, rec.by, rec.created_at,
            )).rowcount == 1

    def release_hold(
        self, tenant_id: str, kind: str, target: str, *, by: str, at: float
    ) -> bool:
        """Lift a standing hold."""
        with self._tx() as c:
            return c.execute(_Q["release_hold"], (at, by, tenant_id, kind, target)).rowcount == 1

    def list_holds(
        self, tenant_id: str | None = None, *, released: bool = False
    ) -> list[HoldRecord]:
        """Standing (and, with ``released``, lifted) holds."""
        rows = self._query_named("list_holds", tenant_id=tenant_id, released=released)
        return [HoldRecord(*r) for r in rows]

    # -- purges -----------------------------------------------------------------------------
    def retention_candidates(
        self, tenant_id: str, *, status: str, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """Final runs past a time, not purged, oldest first."""
        rows = self._query_named(
            "retention_candidates", tenant_id=tenant_id, status=status,
            ended_before=ended_before, flow=flow, after_at=after[0] if after else None,
            after_id=after[1] if after else None, limit=limit,
        )
        return [_run(r) for r in rows]

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Tombstone every event, drop checkpoints and signals, clear the error and subject, record
        the purge: one transaction, or nothing."""
        t, r = purge.tenant_id, purge.run_id
        with self._tx() as c:
            head = c.execute(_Q["purge_head"], (t, r)).fetchone()
            if head is not None and head["purged"]:
                return "already"
            check_purge(purge, None if head is None else (
                head["status"], head["last_seq"], head["events"], head["head"]))
            if head["held"]:
                return "held"
            changed = 0
            for e in purge.tombstones:
                changed += c.execute(_Q["tombstone_event"],
                                     (e.payload, t, r, e.seq, e.type, e.hash)).rowcount
            if changed != len(purge.tombstones):
                raise ConflictError(f"run {r}: an event changed since it was read; "
                                    "nothing was purged")
            faults.point("retention.purge_uncommitted")
            c.execute(_Q["delete_checkpoints_of_run"], (t, r))
            c.execute(_Q["delete_signals_of_run"], (t, r))
            c.execute(_Q["clear_run_fields"], (t, r))
            c.execute(_Q["insert_purged_run"], (t, r, purge.sweep_id, purge.at,
                                                len(purge.tombstones), purge.rule))
        return "purged"

    def purged_runs(
        self, tenant_id: str, *, sweep_id: str | None = None, run_id: str | None = None,
        limit: int = 100,
    ) -> list[PurgedRun]:
        """Purges, newest first."""
        rows = self._query_named("purged_runs", tenant_id=tenant_id, sweep_id=sweep_id,
                                 run_id=run_id, limit=limit)
        return [PurgedRun(*r) for r in rows]

    # -- blobs ------------------------------------------------------------------------------
    def blob_keys(self, tenant_id: str, *, after: str | None = None,
                  limit: int = 1000) -> list[str]:
        """Blob keys in order."""
        rows = self._query_named("blob_keys", tenant_id=tenant_id, after=after, limit=limit)
        return [row[0] for row in rows]

    def delete_blobs(self, tenant_id: str, keys: Sequence[str], *, idle: float) -> int:
        """Delete the blobs not written lately."""
        if not keys:
            return 0
        with self._tx() as c:
            return c.execute(_Q["delete_blobs"], {
                "tenant_id": tenant_id, "keys": json.dumps(list(keys)), "idle": idle,
            }).rowcount

    # -- the sweep log ------------------------------------------------------------------------
    def record_sweep(self, rec: SweepRecord) -> None:
        """Write a sweep's entry."""
        with self._tx() as c:
            c.execute(_Q["record_sweep"], (
                rec.sweep_id, rec.tenant_id, rec.started_at, rec.by, rec.finished_at,
                rec.purged, rec.held, rec.skipped, rec.blobs_deleted, rec.collected_at,
            ))

    def list_sweeps(self, tenant_id: str | None = None, *, limit: int = 20) -> list[SweepRecord]:
        """Sweeps, newest first."""
        rows = self._query_named("list_sweeps", tenant_id=tenant_id, limit=limit)
        return [SweepRecord(*r) for r in rows]

