"""The in-memory store's legal holds, retention purges, sweep log and blob deletion
(:class:`~underway.store.holds.HoldStore` and
:class:`~underway.store.retention.RetentionStore`), and when each blob was written."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

from ... import faults
from ..._chunked import LargeBlob
from ...errors import ConflictError
from ..records import (
    Forget,
    ForgottenRun,
    HoldRecord,
    Purge,
    PurgedRun,
    RunRecord,
    SignalRecord,
    StoredEvent,
    StoredLabel,
    SweepRecord,
)
from ..retention import (
    BLOB_REFRESH,
    ForgetResult,
    PurgeResult,
    check_forget,
    check_purge,
    next_forgotten,
)
from ..streams import NewDelta


class MemoryRetention:
    """Holds, purges and the sweep log, held in process memory beside the store's runs,
    events and blobs (which :class:`~underway.store.memory.MemoryStore` owns)."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _events: dict[tuple[str, str], list[StoredEvent]]
    _checkpoints: dict[tuple[str, str], tuple[int, bytes]]
    _checkpoint_history: dict[tuple[str, str], dict[int, bytes]]
    _blobs: dict[tuple[str, str], bytes]
    _chunks: dict[tuple[str, str], list[bytes]]
    _signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]]
    _labels: dict[tuple[str, str], dict[str, StoredLabel]]
    _span_cursors: dict[tuple[str, str], int]
    _streams: dict[tuple[str, str], list[tuple[int, NewDelta]]]

    def __init__(self) -> None:
        self._holds: dict[tuple[str, str, str], HoldRecord] = {}
        self._purged: dict[tuple[str, str], PurgedRun] = {}
        self._sweeps: dict[tuple[str, str], SweepRecord] = {}
        self._written: dict[tuple[str, str], float] = {}
        self._forgotten: dict[str, list[ForgottenRun]] = {}

    def _write_blobs(self, tenant_id: str, blobs: dict[str, bytes]) -> None:
        """Store ``blobs`` (call holding the store's lock): a new blob is written now, one
        stored already is marked written again when its mark is over a day old."""
        now = time.time()
        for k, v in blobs.items():
            key = (tenant_id, k)
            if isinstance(v, LargeBlob):
                if not v.written:
                    self._chunks[key] = list(v.chunks())
                    v.written = True
                v = bytes(v)  # the manifest, without the value it was made from
            self._blobs.setdefault(key, v)
            if self._written.get(key, -BLOB_REFRESH) < now - BLOB_REFRESH:
                self._written[key] = now

    # -- legal holds ----------------------------------------------------------------------
    def put_hold(self, rec: HoldRecord) -> bool:
        """Place a hold unless one stands on the target."""
        key = (rec.tenant_id, rec.kind, rec.target)
        with self._lock:
            old = self._holds.get(key)
            if old is not None and old.active:
                return False
            self._holds[key] = dataclasses.replace(rec, released_at=None, released_by=None)
            return True

    def release_hold(
        self, tenant_id: str, kind: str, target: str, *, by: str, at: float
    ) -> bool:
        """Lift a standing hold."""
        key = (tenant_id, kind, target)
        with self._lock:
            old = self._holds.get(key)
            if old is None or not old.active:
                return False
            self._holds[key] = dataclasses.replace(old, released_at=at, released_by=by)
            return True

    def list_holds(
        self, tenant_id: str | None = None, *, released: bool = False
    ) -> list[HoldRecord]:
        """Standing (and, with ``released``, lifted) holds."""
        with self._lock:
            return [h for k, h in sorted(self._holds.items())
                    if (tenant_id is None or k[0] == tenant_id) and (released or h.active)]

    # -- purges -----------------------------------------------------------------------------
    def retention_candidates(
        self, tenant_id: str, *, status: str, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """Final runs past a time, not purged, oldest first."""
        with self._lock:
            found = sorted(
                (r for (t, run_id), r in self._runs.items()
                 if t == tenant_id and r.status == status and r.updated_at < ended_before
                 and (flow is None or r.flow == flow) and (t, run_id) not in self._purged
                 and (after is None or (r.updated_at, r.run_id) > after)),
                key=lambda r: (r.updated_at, r.run_id),
            )
        return found[:limit]

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Tombstone every event, drop checkpoints and signals, clear the error, record
        the purge: all at once, or nothing."""
        key = (purge.tenant_id, purge.run_id)
        with self._lock:
            if key in self._purged:
                return "already"
            row, events = self._runs.get(key), self._events.get(key, [])
            check_purge(purge, None if row is None else (
                row.status, row.last_seq, len(events), events[-1].seq if events else 0))
            if self._held(purge.tenant_id, purge.run_id):
                return "held"
            by_seq = {e.seq: e for e in events}
            for t in purge.tombstones:
                old = by_seq.get(t.seq)
                if old is None or (old.type, old.hash) != (t.type, t.hash):
                    raise ConflictError(f"run {purge.run_id}: an event changed since it "
                                        "was read; nothing was purged")
            faults.point("retention.purge_uncommitted")
            self._events[key] = [dataclasses.replace(by_seq[t.seq], payload=t.payload)
                                 for t in sorted(purge.tombstones, key=lambda t: t.seq)]
            self._checkpoints.pop(key, None)
            self._checkpoint_history.pop(key, None)
            self._signals.pop(key, None)
            self._labels.pop(key, None)
            assert row is not None
            self._runs[key] = dataclasses.replace(row, error=None, subject=None)
            self._purged[key] = PurgedRun(purge.tenant_id, purge.run_id, purge.sweep_id,
                                          purge.at, len(purge.tombstones), purge.rule)
            return "purged"

    def _held(self, tenant_id: str, run_id: str) -> bool:
        """Whether a standing hold is on the run or on its subject."""
        row = self._runs.get((tenant_id, run_id))
        subject = None if row is None else row.subject
        return any(
            h.active and k[0] == tenant_id and (
                (h.kind == "run" and h.target == run_id)
                or (h.kind == "subject" and h.target == subject))
            for k, h in self._holds.items()
        )

    def purged_runs(
        self, tenant_id: str, *, sweep_id: str | None = None, run_id: str | None = None,
        limit: int = 100,
    ) -> list[PurgedRun]:
        """Purges, newest first."""
        with self._lock:
            found = [p for (t, r), p in self._purged.items()
                     if t == tenant_id and (sweep_id is None or p.sweep_id == sweep_id)
                     and (run_id is None or r == run_id)]
        return sorted(found, key=lambda p: (-p.purged_at, p.run_id))[:limit]

    # -- forgetting ---------------------------------------------------------------------------
    def forget_candidates(
        self, tenant_id: str, *, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """Purged runs that ended before a time, oldest first."""
        with self._lock:
            found = sorted(
                (self._runs[key] for key in self._purged
                 if key[0] == tenant_id and key in self._runs
                 and self._runs[key].updated_at < ended_before
                 and (flow is None or self._runs[key].flow == flow)
                 and (after is None
                      or (self._runs[key].updated_at, self._runs[key].run_id) > after)),
                key=lambda r: (r.updated_at, r.run_id),
            )
        return found[:limit]

    def forget_run(self, forget: Forget) -> ForgetResult:
        """Delete every row of a purged run and append its forget log line: all at once,
        or nothing."""
        key = (forget.tenant_id, forget.run_id)
        with self._lock:
            row = self._runs.get(key)
            if row is None:
                return "gone"
            if key not in self._purged:
                return "unpurged"
            check_forget(forget, (row.status, row.last_seq, row.last_hash))
            if self._held(forget.tenant_id, forget.run_id):
                return "held"
            log = self._forgotten.setdefault(forget.tenant_id, [])
            line = next_forgotten(forget, (log[-1].seq, log[-1].hash) if log else None)
            faults.point("retention.forget_uncommitted")
            del self._runs[key], self._purged[key]
            self._events.pop(key, None)
            self._checkpoints.pop(key, None)
            self._checkpoint_history.pop(key, None)
            self._signals.pop(key, None)
            self._labels.pop(key, None)
            self._span_cursors.pop(key, None)
            self._streams.pop(key, None)
            log.append(line)
            return "forgotten"

    def forgotten_runs(
        self, tenant_id: str, *, after: int = 0, sweep_id: str | None = None,
        limit: int = 1000,
    ) -> list[ForgottenRun]:
        """The tenant's forget log after a line, in order."""
        with self._lock:
            log = self._forgotten.get(tenant_id, [])
            found = [f for f in log[after:] if sweep_id is None or f.sweep_id == sweep_id]
        return found[:limit]

    # -- blobs ------------------------------------------------------------------------------
    def blob_keys(self, tenant_id: str, *, after: str | None = None,
                  limit: int = 1000) -> list[str]:
        """Blob keys in order."""
        with self._lock:
            keys = sorted(k for t, k in self._blobs if t == tenant_id
                          and (after is None or k > after))
        return keys[:limit]

    def delete_blobs(self, tenant_id: str, keys: Sequence[str], *, idle: float) -> int:
        """Delete the blobs not written lately."""
        before = time.time() - idle
        deleted = 0
        with self._lock:
            for k in keys:
                key = (tenant_id, k)
                if key in self._blobs and self._written.get(key, 0.0) < before:
                    del self._blobs[key]
                    self._chunks.pop(key, None)
                    self._written.pop(key, None)
                    deleted += 1
        return deleted

    # -- the sweep log ------------------------------------------------------------------------
    def record_sweep(self, rec: SweepRecord) -> None:
        """Write a sweep's entry."""
        with self._lock:
            self._sweeps[(rec.sweep_id, rec.tenant_id)] = rec

    def list_sweeps(self, tenant_id: str | None = None, *, limit: int = 20) -> list[SweepRecord]:
        """Sweeps, newest first."""
        with self._lock:
            found = [s for s in self._sweeps.values()
                     if tenant_id is None or s.tenant_id == tenant_id]
        return sorted(found, key=lambda s: (-s.started_at, s.sweep_id, s.tenant_id))[:limit]
