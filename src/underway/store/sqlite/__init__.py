"""SQLite store: the embedded default. WAL journal, ``synchronous=FULL``.

Writers serialize through ``BEGIN IMMEDIATE``, which is also what makes claiming correct
when several worker processes share one database file. The store is one class made of one
part per role (``journal``, ``leases``, ``inbox``, ``schedules``, ``access``, ``consent``,
``retention``, ``keys``, ``budgets``, span exports and live streams), over one connection
(``connection``); the SQL is in ``store/sql/sqlite.sql``. Each part inherits the bodies it
shares with PostgreSQL from :mod:`underway.store._sqlbase` and writes only what SQLite does
its own way.
"""

from __future__ import annotations

from .._sqlbase.spans import SQLSpanExports
from .._sqlbase.streams import SQLStreams
from ..base import Dialect
from ..wakeups import Polling, Wakeups
from ._access import Access
from ._budgets import Budgets
from ._consent import Consent
from ._inbox import Inbox
from ._journal import Journal
from ._keys import Keys
from ._leases import Leases
from ._retention import Retention
from ._schedules import Schedules

__all__ = ["SQLiteStore"]


class SQLiteStore(
    Journal, Leases, Inbox, Schedules, Access, Consent, Retention, Keys, Budgets,
    SQLSpanExports, SQLStreams,
):
    """A :class:`~underway.store.base.Store` on one SQLite database file.

    ``busy_timeout_ms`` is how long a writer waits for another process's write lock.
    """

    dialect: Dialect = "sqlite"

    def wakeups(self, *, name: str) -> Wakeups:
        """Nothing is pushed on SQLite: workers poll."""
        return Polling()
