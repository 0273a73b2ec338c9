"""The client's reads of live streams: the deltas of the model calls a run streams, while
they run (:mod:`underway.store.streams`), from the store or from ``GET /v1/runs/{run_id}/
stream`` over HTTP (the transport's).

A consumer keeps the offset of the last delta it saw and asks for what comes after it, so
it never sees a delta twice, even across reconnects. A ``restart`` delta says that the
call's earlier attempt was abandoned (its worker died or the provider failed mid-answer):
drop the partial answer of that call and take the deltas that follow. A ``done`` delta
says the call's reply is journaled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..store.streams import StreamDelta

if TYPE_CHECKING:
    from ._transport import Transport

PAGE = 500
"""The most deltas one read returns."""


class Streams:
    """What :class:`~underway.client.Client` reads of runs' live streams."""

    _transport: Transport

    def read_stream(self, run_id: str, *, after: int = 0, limit: int = PAGE,
                    tenant_id: str = "default") -> list[StreamDelta]:
        """The run's live deltas after offset ``after``, oldest first.

        A delta the store holds sealed and no key opens (here, or on the server) reads
        ``{"type": "encrypted"}``.

        Args:
            run_id: The run.
            after: The offset of the last delta already seen (0: from the start).
            limit: The most deltas returned.
            tenant_id: The run's tenant.

        Raises:
            RunNotFound: There is no such run in the tenant.
        """
        return self._transport.read_stream(self._transport.tenant(tenant_id), run_id,
                                           after, limit)

    async def stream(self, run_id: str, *, after: int = 0, tenant_id: str = "default",
                     follow: bool = True) -> AsyncIterator[StreamDelta]:
        """The run's live deltas after offset ``after`` as they are written; ends once the
        run has finished and every delta was given (or at once, without ``follow``, when
        none is left).

        On a database, a write wakes the reader on PostgreSQL; elsewhere the reader looks
        every :data:`~underway.store.streams.POLL_S` seconds. Over HTTP it follows
        ``GET /v1/runs/{run_id}/stream`` and, when the connection drops, reconnects after
        the last offset it gave.

        Args:
            run_id: The run.
            after: The offset of the last delta already seen (0: from the start).
            tenant_id: The run's tenant.
            follow: Wait for more until the run has finished.

        Raises:
            RunNotFound: There is no such run in the tenant.
        """
        async for d in self._transport.stream(tenant_id, run_id, after, follow, PAGE):
            yield d

    def stream_page(self, run_id: str, after: int, tenant_id: str = "default",
                    limit: int = PAGE) -> tuple[list[StreamDelta], bool]:
        """The deltas after ``after``, and whether the run has finished with none left.

        Args:
            run_id: The run.
            after: The offset of the last delta already seen.
            tenant_id: The run's tenant.
            limit: The most deltas returned.

        Raises:
            RunNotFound: There is no such run in the tenant.
        """
        return self._transport.stream_page(self._transport.tenant(tenant_id), run_id,
                                           after, limit)
