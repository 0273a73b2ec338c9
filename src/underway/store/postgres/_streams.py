"""The live streams of :class:`~underway.store.postgres.PostgresStore`: the shared SQL, and
a bell that LISTENs, so a reader wakes when a write commits instead of at its next poll."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg

from .._sqlbase.streams import SQLStreams
from ..streams import StreamBell
from ._connection import _Q

log = logging.getLogger("underway.store")


class ListenBell:
    """A :class:`~underway.store.streams.StreamBell` on a LISTEN connection of its own,
    opened at the first wait. Every write to a live stream sends ``NOTIFY
    underway_stream, '<run id>'`` as it commits. A bell whose connection fails waits out
    the timeout and connects again at the next wait.

    Args:
        conninfo: How to reach the server.
    """

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def wait(self, run_id: str, timeout: float) -> None:
        """Return at a notification for ``run_id``, or after ``timeout`` seconds."""
        try:
            if self._conn is None:
                self._conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, connect_timeout=10,
                    application_name="underway stream reader")
                await self._conn.execute(_Q["stream_listen"])
                # What was written before LISTEN took hold is found by the next read.
                return
            async for note in self._conn.notifies(timeout=timeout):
                if note.payload == run_id:
                    return
        except (psycopg.Error, OSError) as exc:
            log.warning("listening for live streams failed (%s); polling", exc)
            await self.close()
            await asyncio.sleep(timeout)

    async def close(self) -> None:
        """Close the listening connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class Streams(SQLStreams):
    """:class:`~underway.store.streams.LiveStreamStore` on PostgreSQL."""

    conninfo: str

    def stream_bell(self) -> StreamBell:
        """A bell that LISTENs on a connection of its own."""
        return ListenBell(self.conninfo)
