"""The live streams of :class:`~underway.store.postgres.PostgresStore`: the shared SQL, and
bells that LISTEN, so a reader wakes when a write commits instead of at its next look.

Every write to a live stream sends ``NOTIFY underway_stream, '<run id>'`` as it commits.
The readers of one process and event loop share one listening connection: an API server
following a hundred runs holds one connection for them, not a hundred. It is opened with
the first bell and closed with the last.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

import psycopg

from .._sqlbase.streams import SQLStreams
from ..streams import PollingBell, StreamBell
from ._connection import _Q

log = logging.getLogger("underway.store")

RETRY_S = 1.0
"""Seconds between attempts to get a lost listening connection back."""

_LISTENERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Listener]] = (
    weakref.WeakKeyDictionary())


class _Listener:
    """One listening connection, shared by the bells of one event loop and server."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._rung: dict[str, set[asyncio.Event]] = {}
        self._users = 0
        self._task: asyncio.Task[None] | None = None

    def watch(self, run_id: str, rung: asyncio.Event) -> None:
        """Set ``rung`` whenever run ``run_id``'s stream grows, from now on."""
        self._rung.setdefault(run_id, set()).add(rung)
        if self._task is None:
            self._task = asyncio.ensure_future(self._listen())

    def unwatch(self, run_id: str, rung: asyncio.Event) -> None:
        """Stop setting ``rung``; the last bell gone closes the connection."""
        found = self._rung.get(run_id, set())
        found.discard(rung)
        if not found:
            self._rung.pop(run_id, None)
        if not self._rung and self._task is not None:
            self._task.cancel()
            self._task = None

    def _ring_all(self) -> None:
        for bells in self._rung.values():
            for rung in bells:
                rung.set()

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._conninfo, autocommit=True, connect_timeout=10,
                        application_name="underway stream reader") as conn:
                    await conn.execute(_Q["stream_listen"])
                    # What was written while nobody listened is found by a look now.
                    self._ring_all()
                    async for note in conn.notifies():
                        for rung in self._rung.get(note.payload, ()):
                            rung.set()
            except (psycopg.Error, OSError) as exc:
                log.warning("listening for live streams failed (%s); polling", exc)
                self._ring_all()
            await asyncio.sleep(RETRY_S)


class ListenBell:
    """A :class:`~underway.store.streams.StreamBell` rung by NOTIFY, on the connection its
    event loop's readers share. A notification that comes while the reader reads is kept
    for its next wait. Until the connection is up, the bell waits out its timeout.

    Args:
        conninfo: How to reach the server.
    """

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._rung = asyncio.Event()
        self._run: str | None = None
        self._listener: _Listener | None = None

    async def wait(self, run_id: str, timeout: float) -> None:
        """Return at a notification for ``run_id`` (one since the last wait included), or
        after ``timeout`` seconds."""
        if self._run != run_id:
            self._leave()
            loop = asyncio.get_running_loop()
            listeners = _LISTENERS.setdefault(loop, {})
            self._listener = listeners.setdefault(self._conninfo, _Listener(self._conninfo))
            self._listener.watch(run_id, self._rung)
            self._run = run_id
            return  # watched from now on: the reader looks once more before waiting
        try:
            await asyncio.wait_for(self._rung.wait(), timeout)
        except TimeoutError:
            return
        finally:
            self._rung.clear()

    async def close(self) -> None:
        """Stop listening for this reader."""
        self._leave()

    def _leave(self) -> None:
        if self._listener is not None and self._run is not None:
            self._listener.unwatch(self._run, self._rung)
        self._listener, self._run = None, None


class Streams(SQLStreams):
    """:class:`~underway.store.streams.LiveStreamStore` on PostgreSQL."""

    listen_conninfo: str | None

    def stream_bell(self) -> StreamBell:
        """A bell rung by NOTIFY, on a listening connection its event loop shares; one
        that polls behind a transaction pooler given no ``listen_url`` to LISTEN on."""
        if self.listen_conninfo is None:
            return PollingBell()
        return ListenBell(self.listen_conninfo)
