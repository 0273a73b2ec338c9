"""The access log role: an append-only record of every read of a run's data through the API
(who, when, which tenant and run, which endpoint). There is no way to change or remove an
entry: the protocol has none, and on SQLite and PostgreSQL triggers refuse ``UPDATE`` and
``DELETE`` on the table (and ``TRUNCATE`` on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .records import AccessRecord


class AccessLogStore(Protocol):
    """Appends to and reads the access log."""

    def log_access(self, records: Sequence[AccessRecord]) -> None:
        """Append the records, in order, in one transaction (their ``seq`` is ignored: the
        store numbers them, increasing)."""
        ...

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first (``seq`` descending), at most ``limit``: only
        those of ``run_id``, by ``key_id``, at or after ``since`` and before ``until``,
        with ``seq`` below ``before`` (the last ``seq`` of the previous page)."""
        ...
