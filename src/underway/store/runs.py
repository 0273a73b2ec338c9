"""The run index: reading runs' rows and finding every journal (for listings and audits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .records import RunRecord, StoredLabel

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
        search: str | None = None, labels: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first (``created_at`` descending, then run id).

        Args:
            tenant_id: The tenant.
            status: Only runs with this status.
            limit: The most runs returned.
            flow: Only runs of this flow.
            since: Only runs created at or after this time.
            until: Only runs created before this time.
            after: The ``(created_at, run_id)`` of the last run of the previous page. The page
                goes on from there, unchanged by runs created meanwhile.
            id_prefix: Only runs whose id starts with it.
            updated_since: Only runs updated at or after this time.
            updated_until: Only runs updated before this time.
            search: Only runs whose id or flow contains it: a plain substring, case-sensitive,
                with no pattern characters.
            labels: Only runs with every one of these labels, by name and value text
                (:func:`underway.labels.label_text`).
        """
        ...

    def run_labels(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, tuple[StoredLabel, ...]]:
        """The labels of these runs, by run id, sorted by name (a run without labels is
        left out). One query on the index, however many runs.

        Args:
            tenant_id: The tenant.
            run_ids: The runs.
        """
        ...

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about one data subject, oldest first (``created_at``, then run id).

        They are read on the (tenant, subject) index: what erasing, holding or answering for one
        person starts from.

        Args:
            tenant_id: The tenant.
            subject: The data subject.
            limit: The most runs returned (None: all of them).
        """
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
        """(bucket, status, number of runs) of the tenant's runs created in a window.

        A run's bucket is ``floor((created_at - since) / width)`` and its status the one it has
        now. Rows are sorted by bucket and status. With ``width`` 86400 and ``since`` a midnight,
        it counts runs created per day by status. It is one grouped query on the (tenant,
        created_at) index.

        Args:
            tenant_id: The tenant.
            since: Only runs created at or after this time.
            until: Only runs created before this time.
            width: A bucket's width, in seconds.
        """
        ...

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Ids, sorted, of the tenant's runs whose journals may hold events stamped in a window.

        These are runs created before ``until`` whose row was written at or after ``since``. A
        row is written with the run's last event whenever the run changes status or is handed
        back. Runs leased now are included too: a leased run's journal may be ahead of its row.
        It reads the (tenant, updated_at) index, so it costs the runs written since ``since``,
        not every run the tenant ever had.

        Args:
            tenant_id: The tenant.
            since: The window's start.
            until: The window's end.
        """
        ...

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """(tenant, run) of every run with a row or with events, in order — what an audit
        must visit, including a journal whose run row was deleted."""
        ...

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events (of
        ``tenant_id``, or of every tenant when None), sorted by tenant and run."""
        ...
