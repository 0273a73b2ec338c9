"""The span export role: how far each run's journal has been exported as spans.

Spans are derived from the journal (:mod:`underway.telemetry`). An exporter sends the
spans a run's events ended, then records here the seq it exported up to. A worker that
dies between the two sends them again with the same ids, so a backend keeps one copy. A
worker that dies before sending leaves the cursor behind: the next worker that takes the
run up, or starts, sends what was journaled but not exported.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SpanExportStore"]


class SpanExportStore(Protocol):
    """Per run: the seq its spans have been exported up to."""

    def span_cursor(self, tenant_id: str, run_id: str) -> int:
        """The seq run ``run_id``'s spans were exported up to (0: none yet).

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
        """
        ...

    def advance_span_cursor(self, tenant_id: str, run_id: str, seq: int) -> None:
        """Record that the spans of run ``run_id`` up to ``seq`` were exported. A cursor
        never moves back.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            seq: The last event whose spans were sent.
        """
        ...

    def unexported_runs(self, *, since: float, limit: int) -> list[tuple[str, str]]:
        """Runs of every tenant whose row was written at ``since`` or later and whose
        journal head is past their span cursor, as ``(tenant_id, run_id)``.

        A run's row holds its head whenever it is handed back, so this finds every run a
        worker journaled and handed back but did not export.

        Args:
            since: The earliest row write to look at (epoch seconds).
            limit: The most runs returned.
        """
        ...
