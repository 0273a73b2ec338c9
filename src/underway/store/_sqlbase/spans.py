"""The span export cursors (:class:`~underway.store.spans.SpanExportStore`), as both SQL
dialects run them."""

from __future__ import annotations

from .dialect import SQLBase


class SQLSpanExports(SQLBase):
    """:class:`~underway.store.spans.SpanExportStore` in SQL."""

    def span_cursor(self, tenant_id: str, run_id: str) -> int:
        """The seq the run's spans were exported up to (0: none yet)."""
        rows = self._all("span_cursor", tenant_id=tenant_id, run_id=run_id)
        return int(rows[0][0]) if rows else 0

    def advance_span_cursor(self, tenant_id: str, run_id: str, seq: int) -> None:
        """Move the run's cursor to ``seq`` (never back)."""
        self._count("advance_span_cursor", tenant_id=tenant_id, run_id=run_id, seq=seq)

    def unexported_runs(self, *, since: float, limit: int) -> list[tuple[str, str]]:
        """Runs written since ``since`` whose head is past their cursor."""
        return [(str(t), str(r)) for t, r in
                self._all("unexported_runs", since=since, limit=limit)]
