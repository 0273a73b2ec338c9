"""SQLite store: the embedded default. WAL journal, ``synchronous=FULL``.

Writers serialize through ``BEGIN IMMEDIATE``, which is also what makes claiming correct
when several worker processes share one database file. The store is one class made of one
part per role (``journal``, ``leases``, ``inbox``, ``schedules``, ``access``, ``consent``,
``retention``, ``keys``, ``budgets``), over one connection (``connection``); the SQL is in
``store/sql/sqlite.sql``. Each part inherits the bodies it shares with PostgreSQL from
:mod:`underway.store._sqlbase` and writes only what SQLite does its own way.
"""

from __future__ import annotations

from ..base import Dialect
from ..wakeups import Polling, Wakeups
from .access import Access
from .budgets import Budgets
from .consent import Consent
from .inbox import Inbox
from .journal import Journal
from .keys import Keys
from .leases import Leases
from .retention import Retention
from .schedules import Schedules

__all__ = ["SQLiteStore"]


class SQLiteStore(
    Journal, Leases, Inbox, Schedules, Access, Consent, Retention, Keys, Budgets,
):
    """A :class:`~underway.store.base.Store` on one SQLite database file.

    ``busy_timeout_ms`` is how long a writer waits for another process's write lock.
    """

    dialect: Dialect = "sqlite"

    def wakeups(self, *, name: str) -> Wakeups:
        """Nothing is pushed on SQLite: workers poll."""
        return Polling()
