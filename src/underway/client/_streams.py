"""The client's reads of live streams: the deltas of the model calls a run streams, while
they run (:mod:`underway.store.streams`).

A consumer keeps the offset of the last delta it saw and asks for what comes after it, so
it never sees a delta twice, even across reconnects. A ``restart`` delta says that the
call's earlier attempt was abandoned (its worker died or the provider failed mid-answer):
drop the partial answer of that call and take the deltas that follow. A ``done`` delta
says the call's reply is journaled.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from ..codec import ENCRYPTED, Codec, stream_where
from ..errors import RunNotFound
from ..store._offload import run_io
from ..store.base import FINAL, Store
from ..store.streams import StreamDelta

PAGE = 500
"""The most deltas one read returns."""
WAIT_S = 1.0
"""The longest a reader waits for a bell before it looks again."""


class Streams:
    """What :class:`~underway.client.Client` reads of runs' live streams."""

    @property
    def store(self) -> Store:
        """The store (a database client's only)."""
        raise NotImplementedError

    @property
    def codec(self) -> Codec:
        """How payloads are opened (a database client's only)."""
        raise NotImplementedError

    def read_stream(self, run_id: str, *, after: int = 0, limit: int = PAGE,
                    tenant_id: str = "default") -> list[StreamDelta]:
        """The run's live deltas after offset ``after``, oldest first.

        A delta the store holds sealed and no key here opens reads
        ``{"type": "encrypted"}``.

        Args:
            run_id: The run.
            after: The offset of the last delta already seen (0: from the start).
            limit: The most deltas returned.
            tenant_id: The run's tenant.

        Raises:
            RunNotFound: There is no such run in the tenant.
        """
        row = self.store.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        out = []
        for offset, d in self.store.read_stream(tenant_id, run_id, after=after, limit=limit):
            text = self.codec.open_text(
                d.data, stream_where(tenant_id, run_id, d.key, d.attempt, row.subject))
            delta = {"type": "encrypted"} if text == ENCRYPTED else json.loads(text)
            out.append(StreamDelta(offset, d.key, d.step, d.index, d.attempt, delta,
                                   d.written_at))
        return out

    async def stream(self, run_id: str, *, after: int = 0, tenant_id: str = "default",
                     follow: bool = True) -> AsyncIterator[StreamDelta]:
        """The run's live deltas after offset ``after`` as they are written; ends once the
        run has finished and every delta was given (or at once, without ``follow``, when
        none is left).

        On PostgreSQL a write wakes the reader; elsewhere the reader looks every
        :data:`~underway.store.streams.POLL_S` seconds.

        Args:
            run_id: The run.
            after: The offset of the last delta already seen (0: from the start).
            tenant_id: The run's tenant.
            follow: Wait for more until the run has finished.

        Raises:
            RunNotFound: There is no such run in the tenant.
        """
        bell = await run_io(self.store, self.store.stream_bell)
        try:
            while True:
                found = await run_io(self.store, self.stream_page, run_id, after, tenant_id)
                for d in found[0]:
                    after = d.offset
                    yield d
                if found[0]:
                    continue
                if found[1] or not follow:
                    return
                await bell.wait(run_id, WAIT_S)
        finally:
            await bell.close()

    def stream_page(self, run_id: str, after: int,
                    tenant_id: str = "default") -> tuple[list[StreamDelta], bool]:
        """The deltas after ``after``, and whether the run has finished with none left.

        Every delta is written before the run's last commit, so one more read after the
        row says it finished finds any that landed in between.

        Args:
            run_id: The run.
            after: The offset of the last delta already seen.
            tenant_id: The run's tenant.
        """
        found = self.read_stream(run_id, after=after, tenant_id=tenant_id)
        if found:
            return found, False
        row = self.store.get_run(tenant_id, run_id)
        if row is None or row.status not in FINAL:
            return [], False
        found = self.read_stream(run_id, after=after, tenant_id=tenant_id)
        return found, not found
