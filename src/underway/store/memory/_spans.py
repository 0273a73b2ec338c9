"""The in-memory store's span export cursors
(:class:`~underway.store.spans.SpanExportStore`)."""

from __future__ import annotations

import threading
from typing import Any


class MemorySpanExports:
    """Span export cursors held in process memory."""

    _runs: dict[tuple[str, str], Any]

    def __init__(self) -> None:
        self._span_lock = threading.Lock()
        self._span_cursors: dict[tuple[str, str], int] = {}

    def span_cursor(self, tenant_id: str, run_id: str) -> int:
        """The seq the run's spans were exported up to (0: none yet)."""
        with self._span_lock:
            return self._span_cursors.get((tenant_id, run_id), 0)

    def advance_span_cursor(self, tenant_id: str, run_id: str, seq: int) -> None:
        """Move the run's cursor to ``seq`` (never back)."""
        with self._span_lock:
            key = (tenant_id, run_id)
            self._span_cursors[key] = max(seq, self._span_cursors.get(key, 0))

    def unexported_runs(self, *, since: float, limit: int) -> list[tuple[str, str]]:
        """Runs written since ``since`` whose head is past their cursor."""
        with self._span_lock:
            cursors = dict(self._span_cursors)
        found = sorted((row.updated_at, key) for key, row in list(self._runs.items())
                       if row.updated_at >= since and row.last_seq > cursors.get(key, 0))
        return [key for _, key in found[:limit]]
