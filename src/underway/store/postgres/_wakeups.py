"""Wake-ups on PostgreSQL: LISTEN on a connection of the worker's own.

Behind a transaction pooler (``pooler=transaction``) LISTEN goes to the direct
``listen_url``; given none, the worker polls, woken by nothing, so its ``poll`` bounds how
long new work waits. NOTIFY is sent in transactions, so it passes the pooler either way.

New runs, signals and runs handed back send ``NOTIFY underway_<schema digest>, '<queue>'``
in the transaction that makes them due (see ``wake_channel``, ``notify_run`` and
``notify_queues`` in ``store/sql/postgres.sql``), so a listening worker hears of them when
they commit. The channel is the schema's: a channel is the database's, and workers of one
schema would otherwise claim at every run of every other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from ..wakeups import RETRY_MAX_S
from ._connection import _Q

log = logging.getLogger("underway.worker")


class Listener:
    """The :class:`~underway.store.wakeups.Wakeups` of a PostgreSQL store."""

    def __init__(
        self, conninfo: str | None, pool: ConnectionPool[psycopg.Connection[Any]], *,
        name: str, schema: str | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._pool = pool
        self._name = name
        self._listening = False

    @property
    def listening(self) -> bool:
        """True while the listening connection is up."""
        return self._listening

    async def watch(self, queues: list[str] | None, *, retry: float) -> AsyncIterator[None]:
        """Yield on every notification for ``queues`` and whenever listening (re)starts;
        reconnect after a failure, backing off from ``retry`` to :data:`RETRY_MAX_S`.
        With nowhere to LISTEN (a transaction pooler, no ``listen_url``) it ends at once:
        the worker polls."""
        if self._conninfo is None:
            return
        backoff = retry
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, connect_timeout=10,
                    application_name=f"underway worker {self._name}"[:63],
                ) as conn:
                    row = await (await conn.execute(
                        _Q["wake_channel"], {"schema": self._schema})).fetchone()
                    assert row is not None
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0])))
                    self._listening = True
                    backoff = retry
                    # Notifications sent while nobody listened are lost: look now.
                    yield
                    async for note in conn.notifies():
                        if queues is None or note.payload in queues:
                            yield
            except Exception as exc:
                log.warning("listening for new work failed (%s: %s); polling until "
                            "reconnected", type(exc).__name__, exc)
            finally:
                self._listening = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_S)

    def announce(self, queues: list[str]) -> None:
        """NOTIFY listening workers that runs of ``queues`` are ready again."""
        with self._pool.connection() as conn:
            conn.execute(_Q["notify_queues"], {"queues": queues})
