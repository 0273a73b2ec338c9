"""The live streams (:class:`~underway.store.streams.LiveStreamStore`), as both SQL
dialects run them."""

from __future__ import annotations

import json

from ..streams import NewDelta
from .dialect import SQLBase


class SQLStreams(SQLBase):
    """:class:`~underway.store.streams.LiveStreamStore` in SQL."""

    def append_stream(self, tenant_id: str, run_id: str, fence: int,
                      deltas: list[NewDelta]) -> bool:
        """Write ``deltas`` in one statement; False when the lease is not ``fence``."""
        if not deltas:
            return True
        # SQLite reads the batch as one JSON array of rows, PostgreSQL as one array per
        # column: each dialect's statement takes the parameters it names.
        rows = self._written(
            "stream_append", tenant_id=tenant_id, run_id=run_id, fence=fence,
            rows=json.dumps([[d.key, d.step, d.index, d.attempt, d.data, d.written_at]
                             for d in deltas]),
            keys=[d.key for d in deltas], steps=[d.step for d in deltas],
            indexes=[d.index for d in deltas], attempts=[d.attempt for d in deltas],
            deltas=[d.data for d in deltas], written=[d.written_at for d in deltas],
        )
        return bool(rows)

    def stream_attempt(self, tenant_id: str, run_id: str, key: str) -> int:
        """The last attempt that streamed call ``key`` (0: none yet)."""
        rows = self._all("stream_attempt", tenant_id=tenant_id, run_id=run_id, key=key)
        return int(rows[0][0]) if rows else 0

    def read_stream(self, tenant_id: str, run_id: str, *, after: int,
                    limit: int) -> list[tuple[int, NewDelta]]:
        """The run's deltas after offset ``after``, oldest first."""
        return [(int(o), NewDelta(key=str(k), step=str(s), index=int(i), attempt=int(a),
                                  data=str(d), written_at=float(w)))
                for o, k, s, i, a, d, w in self._all(
                    "stream_read", tenant_id=tenant_id, run_id=run_id, after=after,
                    limit=limit)]

    def drop_stream(self, tenant_id: str, run_id: str, *, keep: str | None) -> int:
        """Delete the run's deltas, but those of call ``keep``."""
        return self._count("stream_drop", tenant_id=tenant_id, run_id=run_id, keep=keep)

    def prune_streams(self, *, before: float) -> int:
        """Delete the deltas written before ``before`` of every run no worker holds."""
        return self._count("stream_prune", before=before)
