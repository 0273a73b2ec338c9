"""The in-memory store's live streams (:class:`~underway.store.streams.LiveStreamStore`)."""

from __future__ import annotations

import threading

from ..records import RunRecord
from ..streams import NewDelta


class MemoryStreams:
    """The deltas of streamed model calls, held in process memory."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]

    def __init__(self) -> None:
        self._streams: dict[tuple[str, str], list[tuple[int, NewDelta]]] = {}
        self._stream_offset = 0

    def append_stream(self, tenant_id: str, run_id: str, fence: int,
                      deltas: list[NewDelta]) -> bool:
        """Write ``deltas`` after the run's last; False when the lease is not ``fence``."""
        with self._lock:
            row = self._runs.get((tenant_id, run_id))
            if row is None or row.lease_token != fence:
                return False
            rows = self._streams.setdefault((tenant_id, run_id), [])
            for d in deltas:
                self._stream_offset += 1
                rows.append((self._stream_offset, d))
            return True

    def stream_attempt(self, tenant_id: str, run_id: str, key: str) -> int:
        """The last attempt that streamed call ``key`` (0: none yet)."""
        with self._lock:
            rows = self._streams.get((tenant_id, run_id), [])
            return max((d.attempt for _, d in rows if d.key == key), default=0)

    def read_stream(self, tenant_id: str, run_id: str, *, after: int,
                    limit: int) -> list[tuple[int, NewDelta]]:
        """The run's deltas after offset ``after``, oldest first."""
        with self._lock:
            rows = self._streams.get((tenant_id, run_id), [])
            return [r for r in rows if r[0] > after][:limit]

    def drop_stream(self, tenant_id: str, run_id: str, *, keep: str | None) -> int:
        """Delete the run's deltas, but those of call ``keep``."""
        with self._lock:
            rows = self._streams.get((tenant_id, run_id), [])
            kept = [r for r in rows if keep is not None and r[1].key == keep]
            self._streams[(tenant_id, run_id)] = kept
            return len(rows) - len(kept)

    def prune_streams(self, *, before: float) -> int:
        """Delete the deltas written before ``before`` of every run no worker holds."""
        dropped = 0
        with self._lock:
            for key, rows in self._streams.items():
                row = self._runs.get(key)
                if row is not None and row.lease_owner is not None:
                    continue
                kept = [r for r in rows if r[1].written_at >= before]
                dropped += len(rows) - len(kept)
                self._streams[key] = kept
        return dropped
