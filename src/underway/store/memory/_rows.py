"""The in-memory store's rows found suspect and repaired from their journal
(:meth:`~underway.store.leases.LeaseStore.suspect_runs` and
:meth:`~underway.store.leases.LeaseStore.repair_run`)."""

from __future__ import annotations

import dataclasses
import math
import threading

from ..leases import MAX_LEASE_TTL
from ..records import FINAL, RowRepair, RunRecord, StoredEvent

_ENDS = ("RunCompleted", "RunFailed", "RunCancelled")


class MemoryRows:
    """Suspect rows and their repair, on the memory store's dictionaries."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _events: dict[tuple[str, str], list[StoredEvent]]

    def suspect_runs(
        self, *, now: float, limit: int = 100, since: float | None = None,
    ) -> list[tuple[str, str]]:
        """Rows the journal likely contradicts (see the protocol).

        Args:
            now: The time leases and wake times are judged at.
            limit: How many rows at most, in (tenant, run) order.
            since: Check only the rows written at or after this time (None: every row).
        """
        with self._lock:
            found = [key for key, row in sorted(self._runs.items())
                     if (since is None or row.updated_at >= since)
                     and self._suspect(row, self._events.get(key, []), now)]
        return found[:limit]

    @staticmethod
    def _suspect(row: RunRecord, events: list[StoredEvent], now: float) -> bool:
        def bad(v: object) -> bool:
            return v is not None and not (type(v) in (int, float)
                                          and math.isfinite(v))  # type: ignore[arg-type]

        head = events[row.last_seq - 1].type if 0 < row.last_seq <= len(events) else None
        expires = row.lease_expires_at
        if bad(row.next_wake_at) or bad(expires):
            return True
        if row.lease_owner is not None and (expires is None or expires > now + MAX_LEASE_TTL):
            return True
        if row.status in FINAL:
            return head not in _ENDS
        free = row.lease_owner is None or (expires is not None and expires < now)
        return row.next_wake_at is None and free and (
            row.status == "ready" or head == "TimerSet")

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Rewrite a row from its journal while it is as it was read."""
        key = (repair.tenant_id, repair.run_id)
        seen, u = repair.seen, repair.update
        with self._lock:
            row = self._runs.get(key)
            if row is None or (row.lease_token, row.last_seq, row.status) != (
                    seen.lease_token, seen.last_seq, seen.status):
                return False
            if len(self._events.get(key, [])) != repair.head_seq:
                return False
            if repair.token is not None and row.lease_owner is None:
                return False
            drop = repair.clear_lease or repair.token is not None
            self._runs[key] = dataclasses.replace(
                row, last_seq=repair.head_seq, last_hash=repair.head_hash, status=u.status,
                step=u.step, next_wake_at=u.next_wake_at, waiting_signal=u.waiting_signal,
                error=u.error, request_kind=u.request_kind, updated_at=now,
                lease_owner=None if drop else row.lease_owner,
                lease_expires_at=None if drop else row.lease_expires_at,
            )
            return True
