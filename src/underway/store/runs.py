"""The run index: reading runs' rows and finding every journal (for listings and audits)."""

from __future__ import annotations

from typing import Protocol

from .records import RunRecord


class RunStore(Protocol):
    """Reads the runs table (a projection of the journals) and the journals' heads."""

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, if it exists."""
        ...

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, optionally with one status."""
        ...

    def tenants(self) -> list[str]:
        """Every tenant that has runs."""
        ...

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """(tenant, run) of every run with a row or with events, in order — what an audit
        must visit, including a journal whose run row was deleted."""
        ...

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events (of
        ``tenant_id``, or of every tenant when None), sorted by tenant and run."""
        ...
