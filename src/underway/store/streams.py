"""The live stream role: the deltas of a model call streamed while it runs.

A step that calls ``ctx.model(model, request, stream=True)`` gets the model's deltas
(tokens, tool-call fragments) as they arrive. The engine writes them here, in batches, so
a reader in another process (the API server, the console, :meth:`Client.stream
<underway.client.Client.stream>`) sees them before the call ends. The complete reply is
journaled once, as the journal always held it; these rows are a cache of the call in
flight, not the truth.

Each row has an **offset**: it strictly increases along a run's stream and is never
reused, so a reader that remembers the last offset it saw asks for the rows after it
and never sees a delta twice. A row names its call (the call's idempotency key, step and
index) and the **attempt** that streamed it: when a worker dies mid-call, the next one
makes the call again under the next attempt and first writes a ``restart`` delta, so a
reader learns that the partial answer it holds was abandoned.

Writes are fenced by the lease: a worker that lost the run writes nothing more.

A reader waits for more with a :class:`StreamBell` (:meth:`LiveStreamStore.stream_bell`).
PostgreSQL rings it: every write sends ``NOTIFY underway_stream, '<run id>'``. SQLite and
memory push nothing: their bell only waits, so a reader there polls (:data:`POLL_S`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from ..events import JSON

__all__ = ["POLL_S", "LiveStreamStore", "NewDelta", "PollingBell", "StreamBell", "StreamDelta"]

POLL_S = 0.05
"""How often a reader of a store that pushes nothing looks for new deltas (seconds)."""


@dataclass(frozen=True, slots=True)
class NewDelta:
    """A delta to write: its call, attempt and payload (the store gives it an offset).

    Args:
        key: The call's idempotency key.
        step: The step making the call.
        index: The call's position in the step.
        attempt: The attempt of the call that streamed it (1, then 2 after a restart...).
        data: The stored text: the delta's JSON, or its sealed box when the store
            encrypts (:meth:`~underway.codec.Codec.seal_text`).
        written_at: When it was written (epoch seconds).
    """

    key: str
    step: str
    index: int
    attempt: int
    data: str
    written_at: float


@dataclass(frozen=True, slots=True)
class StreamDelta:
    """A delta of a run's live stream, as a reader sees it.

    Args:
        offset: Its place in the run's stream; strictly increasing, never reused.
        key: The call's idempotency key.
        step: The step making the call.
        index: The call's position in the step.
        attempt: The attempt of the call that streamed it.
        delta: The delta: a JSON object with a ``type`` (``text``, ``tool_call``,
            ``restart``, ``done``, or one an integration adds).
        written_at: When it was written (epoch seconds).
    """

    offset: int
    key: str
    step: str
    index: int
    attempt: int
    delta: JSON
    written_at: float

    def to_json(self) -> dict[str, JSON]:
        """The delta with its call and offset, as one JSON object."""
        return {"offset": self.offset, "key": self.key, "step": self.step,
                "index": self.index, "attempt": self.attempt, "delta": self.delta,
                "written_at": self.written_at}


class StreamBell(Protocol):
    """Wakes a reader when a run's live stream may have grown."""

    async def wait(self, run_id: str, timeout: float) -> None:
        """Return once run ``run_id``'s stream may have grown, at the latest after
        ``timeout`` seconds (a reader looks again either way).

        Args:
            run_id: The run read.
            timeout: The longest wait, in seconds.
        """
        ...

    async def close(self) -> None:
        """Let go of what the bell holds (a listening connection)."""
        ...


class PollingBell:
    """The bell of a store that pushes nothing: it waits ``poll`` seconds at most.

    Args:
        poll: The longest wait between two looks, in seconds.
    """

    def __init__(self, poll: float = POLL_S) -> None:
        self.poll = poll

    async def wait(self, run_id: str, timeout: float) -> None:
        """Sleep the shorter of ``timeout`` and the poll interval."""
        await asyncio.sleep(min(timeout, self.poll))

    async def close(self) -> None:
        """Nothing to let go of."""


class LiveStreamStore(Protocol):
    """The deltas of the model calls a run streams, with offsets (see the module)."""

    def append_stream(self, tenant_id: str, run_id: str, fence: int,
                      deltas: list[NewDelta]) -> bool:
        """Write ``deltas`` after the run's last, in order, in one transaction; False (and
        nothing written) when the run's lease is no longer ``fence``.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            fence: The lease token of the worker writing.
            deltas: What to write.
        """
        ...

    def stream_attempt(self, tenant_id: str, run_id: str, key: str) -> int:
        """The last attempt that streamed call ``key`` (0: none yet).

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            key: The call's idempotency key.
        """
        ...

    def read_stream(self, tenant_id: str, run_id: str, *, after: int,
                    limit: int) -> list[tuple[int, NewDelta]]:
        """The run's deltas after offset ``after``, oldest first, with their offsets.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            after: The last offset the reader has seen (0: from the start).
            limit: The most deltas returned.
        """
        ...

    def drop_stream(self, tenant_id: str, run_id: str, *, keep: str | None) -> int:
        """Delete the run's deltas, but those of call ``keep``; how many were deleted.

        A call's deltas are dropped once a later streamed call's reply is journaled
        (``keep`` is that call), or when the run is purged (``keep`` None).

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            keep: The call whose deltas stay (None: none).
        """
        ...

    def prune_streams(self, *, before: float) -> int:
        """Delete the deltas written before ``before`` of every run no worker holds;
        how many were deleted.

        Args:
            before: The oldest write kept (epoch seconds).
        """
        ...

    def stream_bell(self) -> StreamBell:
        """A new bell for one reader: it rings when a run's stream grows (PostgreSQL), or
        only waits (the stores that push nothing)."""
        ...
