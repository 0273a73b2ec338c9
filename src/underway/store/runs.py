"""The run index: reading runs' rows and finding every journal (for listings and audits)."""

from __future__ import annotations

from typing import Protocol

from .records import RunRecord

__all__ = ["RunStore"]


class RunStore(Protocol):
    """Reads the runs table (a projection of the journals) and the journals' heads."""

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, if it exists."""
        ...

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
        updated_since: float | None = None, updated_until: float | None = None,
        search: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first (``created_at`` descending, then run id), at most
        ``limit``: only those with ``status``, of ``flow``, created at or after ``since``
        and before ``until``, updated at or after ``updated_since`` and before
        ``updated_until``, whose id starts with ``id_prefix``, whose id or flow contains
        ``search`` (a plain substring, case-sensitive; no pattern characters). ``after`` is
        the ``(created_at, run_id)`` of the last run of the previous page: the page goes on
        from there, unchanged by runs created meanwhile."""
        ...

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about data subject ``subject``, oldest first (``created_at``,
        then run id), at most ``limit`` (None: all of them), read on the (tenant, subject)
        index: what erasing, holding or answering for one person starts from."""
        ...

    def tenants(self) -> list[str]:
        """Every tenant that has runs."""
        ...

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, number of runs) of every tenant and status that has runs, sorted
        by tenant and status (what ``/metrics`` reports on a scrape)."""
        ...

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, status, number of runs) of the tenant's runs created at or after
        ``since`` and before ``until``, where a run's bucket is ``floor((created_at - since)
        / width)`` and its status the one it has now; sorted by bucket and status. With
        ``width`` 86400 and ``since`` a midnight: runs created per day by status. One
        grouped query on the (tenant, created_at) index."""
        ...

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Ids, sorted, of the tenant's runs whose journals may hold events stamped at or
        after ``since`` and before ``until``: runs created before ``until`` whose row was
        written at or after ``since`` (a row is written with the run's last event whenever
        the run changes status or is handed back), and runs leased now (a leased run's
        journal may be ahead of its row). Read on the (tenant, updated_at) index: it costs
        the runs written since ``since``, not every run the tenant ever had."""
        ...

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """(tenant, run) of every run with a row or with events, in order — what an audit
        must visit, including a journal whose run row was deleted."""
        ...

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events (of
        ``tenant_id``, or of every tenant when None), sorted by tenant and run."""
        ...
