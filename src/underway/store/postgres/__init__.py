"""PostgreSQL store: the path to many worker machines. psycopg 3 with a connection pool.

Connections run in autocommit mode; a multi-statement operation is sent as one pipeline
and so runs as one implicit transaction that commits at the pipeline's sync point, or
rolls back whole when any statement in it fails. An append therefore costs one round trip
and one durable commit, like a single-row insert. Workers claim runs with
``FOR UPDATE SKIP LOCKED``; appends are fenced by the run row's lease token and last
sequence number inside the same transaction. New runs, signals and runs handed back are
announced with NOTIFY; a worker LISTENs (``wakeups``).

``postgresql://user@host:port/db?schema=name`` keeps every table in schema ``name``
(created by :meth:`PostgresStore.migrate`); without it the server's search path applies.
Behind PgBouncer in transaction mode add ``pooler=transaction``, and ``listen_url=`` (a
percent-encoded direct URL) for LISTEN (:mod:`._pooler`).

The store is one class made of one part per role (``journal``, ``leases``, ``inbox``,
``schedules``, ``access``, ``consent``, ``retention``, ``keys``, ``budgets``, span exports
and live streams) over one pool (``connection``); the SQL is in ``store/sql/postgres.sql``.
Each part inherits the bodies it shares with SQLite from :mod:`underway.store._sqlbase` and
writes only what PostgreSQL does its own way.
"""

from __future__ import annotations

from ..._extras import needs_extra
from .._sqlbase.spans import SQLSpanExports
from .._urls import split_url
from ..base import Dialect
from ..wakeups import Wakeups

# psycopg fails on import where it finds no libpq (its plain package on a machine without
# one): the postgres extra brings its binary build, which has its own.
with needs_extra("postgres", "the PostgreSQL store"):
    from ._access import Access
    from ._budgets import Budgets
    from ._consent import Consent
    from ._inbox import Inbox
    from ._journal import Journal
    from ._keys import Keys
    from ._leases import Leases
    from ._retention import Retention
    from ._schedules import Schedules
    from ._streams import Streams
    from ._wakeups import Listener

__all__ = ["PostgresStore", "split_url"]


class PostgresStore(
    Journal, Leases, Inbox, Schedules, Access, Consent, Retention, Keys, Budgets,
    SQLSpanExports, Streams,
):
    """A :class:`~underway.store.base.Store` on a PostgreSQL database (one schema of it).

    Args:
        url: The PostgreSQL URL; a ``schema=`` parameter names the schema to use,
            ``pooler=transaction`` says PgBouncer in transaction mode stands in between,
            and ``listen_url=`` names a direct URL to LISTEN on.
        min_size: The fewest connections the pool keeps.
        max_size: The most connections the pool opens.
        connect_timeout: How long opening the store waits for the server before giving up.
    """

    dialect: Dialect = "postgres"

    def wakeups(self, *, name: str) -> Wakeups:
        """Wake-ups by LISTEN on a connection of their own, named ``underway worker
        <name>`` (on ``listen_url`` when the URL names one; none behind a transaction
        pooler without it: the worker polls); handed-back runs are announced with
        NOTIFY."""
        return Listener(self.listen_conninfo, self.pool, name=name, schema=self.schema)
