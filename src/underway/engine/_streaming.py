"""The live stream of one model call: its deltas written to the store as they arrive.

``ctx.model(model, request, stream=True)`` hands the model an ``emit`` that lands here.
Deltas are written in batches: while one batch is being written, the next gathers, so
the first delta costs one write and a fast model costs a write per round trip, not one
per token. Everything gathered is written before the reply is journaled, so a reader
sees every delta of a call before its ``done``.

A store without the live stream role (:class:`~underway.store.streams.LiveStreamStore`)
gets nothing: the model still streams to the step's own handlers, and the reply is
journaled as always.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import TYPE_CHECKING

from ..codec import stream_where
from ..errors import ConfigurationError
from ..events import JSON
from ..store.streams import LiveStreamStore, NewDelta

if TYPE_CHECKING:
    from ._activation import Activation

log = logging.getLogger("underway.engine")

_ROLE = ("append_stream", "stream_attempt", "drop_stream")


def live_store(store: object) -> LiveStreamStore | None:
    """``store`` when it keeps live streams, else None."""
    if all(hasattr(store, m) for m in _ROLE):
        return store  # type: ignore[return-value]
    return None


class LiveStream:
    """Forwards the deltas of call ``key`` to the run's live stream.

    Args:
        act: The activation making the call.
        key: The call's idempotency key.
        step: The step making it.
        index: Its position in the step.
    """

    def __init__(self, act: Activation, *, key: str, step: str, index: int) -> None:
        self._act = act
        self._store = live_store(act.services.store)
        self._key, self._step, self._index = key, step, index
        self._pending: list[tuple[str | None, float]] = []
        """Deltas not yet written: their JSON text (None: the model started over) and
        when they came."""
        self._opening: asyncio.Task[int] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._fenced_out = False
        self.attempt = 0
        """This attempt of the call: one more than the last that streamed it (0 until
        known)."""

    def open(self) -> None:
        """Look up the last attempt that streamed this call, while the model is asked:
        the request does not wait for the store. The first write waits for the answer,
        and says first, when an earlier attempt streamed, that it was abandoned (a
        ``restart`` delta)."""
        if self._store is not None:
            self._opening = asyncio.ensure_future(self._act.services.io(
                self._store.stream_attempt, self._act.state.tenant_id,
                self._act.state.run_id, self._key))
            # A call that fails before it emits never reads the answer: its failure is
            # retrieved here, not reported as lost.
            self._opening.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def emit(self, delta: JSON) -> None:
        """Forward one delta (a JSON object with a ``type``) from the model. A model that
        starts its answer over (an adapter's retry after part of an answer) emits
        ``{"type": "restart"}``: the call goes on under the next attempt."""
        if not isinstance(delta, dict) or not isinstance(delta.get("type"), str):
            raise ConfigurationError(
                f"a streamed model delta must be a JSON object with a 'type', not {delta!r} "
                f"(call {self._key})")
        if self._store is None or self._fenced_out:
            return
        if delta["type"] == "restart":
            self._add(None)
            return
        try:
            text = json.dumps(delta, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"a streamed model delta is not JSON: {exc} (call {self._key})") from exc
        self._add(text)

    async def flush(self) -> None:
        """Wait until every delta forwarded so far is written."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def finish(self) -> None:
        """After the reply is journaled: write ``done`` and drop earlier calls' deltas."""
        if self._store is None:
            return
        self._add('{"type":"done"}')
        await self.flush()
        s = self._act.state
        try:
            await self._act.services.io(functools.partial(
                self._store.drop_stream, s.tenant_id, s.run_id, keep=self._key))
        except Exception as exc:  # retention drops them later
            log.warning("run %s: earlier live streams not dropped: %s", s.run_id, exc)

    def abandon(self) -> None:
        """Stop writing: the step was cancelled."""
        for task in (self._opening, self._writer):
            if task is not None:
                task.cancel()

    def _add(self, text: str | None) -> None:
        if self._store is None or self._fenced_out:
            return
        self._pending.append((text, self._act.services.clock.now()))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write())

    async def _first(self) -> None:
        """Learn this attempt before the first write (see :meth:`open`)."""
        last = 0
        try:
            if self._opening is not None:
                last = await self._opening
        except Exception as exc:  # the stream is a cache: the call goes on
            log.warning("run %s: live stream of call %s not read: %s",
                        self._act.state.run_id, self._key, exc)
        self.attempt = last + 1
        if last:
            self._pending.insert(0, (None, self._pending[0][1]))
            self.attempt = last

    def _rows(self, pending: list[tuple[str | None, float]]) -> list[NewDelta]:
        """The rows of deltas, each sealed where its attempt puts it."""
        s, codec = self._act.state, self._act.services.journal.codec
        rows = []
        for text, at in pending:
            if text is None:
                self.attempt += 1
                text = f'{{"type":"restart","attempt":{self.attempt}}}'
            where = stream_where(s.tenant_id, s.run_id, self._key, self.attempt, s.subject)
            rows.append(NewDelta(key=self._key, step=self._step, index=self._index,
                                 attempt=self.attempt, data=codec.seal_text(text, where),
                                 written_at=at))
        return rows

    async def _write(self) -> None:
        assert self._store is not None
        s, svc = self._act.state, self._act.services
        if self.attempt == 0:
            await self._first()
        while self._pending and not self._fenced_out:
            batch, self._pending = self._rows(self._pending), []
            try:
                written = await svc.io(self._store.append_stream, s.tenant_id, s.run_id,
                                       self._act.lease.token, batch)
            except Exception as exc:  # a reader misses these; none repeats
                log.warning("run %s: %d live deltas of call %s not written: %s",
                            s.run_id, len(batch), self._key, exc)
                continue
            if not written:
                # The run was taken over: the worker that holds it now streams the call.
                self._fenced_out = True
                self._pending = []
