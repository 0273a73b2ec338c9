"""``GET /v1/runs/{run_id}/stream``: the run's live stream — the tokens and tool-call deltas
of the model calls it streams — as Server-Sent Events.

Each delta is sent as ``id: <offset>``, ``event: delta``, ``data: <JSON>`` (the delta with
its call: ``offset``, ``key``, ``step``, ``index``, ``attempt``, ``delta``). A client that
reconnects with ``Last-Event-ID`` (or ``?after=``) goes on after that offset and never gets
a delta twice. A ``restart`` delta says the call's earlier attempt was abandoned: drop the
partial answer of that call. A ``done`` delta says the call's reply is journaled. The
stream ends (``event: end``) once the run has finished and every delta was sent. A
revoked key ends it (``event: unauthorized``), as the events tail does
(:mod:`._stream`). Each delta passes the run's redactor, as the journal's events do.

``GET /v1/runs/{run_id}/stream/deltas`` answers the same deltas a page at a time, as JSON,
without waiting: for a reader that polls, or that wants what is there now.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, JsonValue

from ..client._streams import PAGE
from ..inputs import MAX_INT
from ..redaction import Redactor
from ..store._offload import run_io
from ..store.streams import StreamDelta
from ._auth import Caller, Principal, ServiceState, State, endpoint, still_authorized
from ._inputs import CheckedRoute
from ._reading import Read
from ._stream import KEEPALIVE_S, sse_of_run

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=CheckedRoute)

WAIT_S = 1.0
"""The longest the server waits for a bell before it looks again (PostgreSQL rings it
when a delta is written; elsewhere it polls every :data:`~underway.store.streams.POLL_S`)."""

_DOC = {200: {"description": "Server-Sent Events: one `delta` per streamed delta, then `end`",
              "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


@endpoint(router, "GET", "/{run_id}/stream", permission="read", run_data=True,
          problems=(403, 404), response_class=StreamingResponse, responses=_DOC)
async def stream_run(
    state: State, who: Caller, request: Request, read: Read,
    run_id: Annotated[str, Path(min_length=1)],
    after: Annotated[int, Query(ge=0, le=MAX_INT,
                                description="Start after this offset.")] = 0,
    last_event_id: Annotated[str | None, Header(
        description="The last offset received.")] = None,
) -> StreamingResponse:
    """Follow the run's live stream: the deltas of its streamed model calls, as they are
    written (redacted as ``GET /v1/runs/{run_id}/events`` redacts events)."""
    return await sse_of_run(state, who, request, read, run_id, after, last_event_id, live)


class Delta(BaseModel):
    """One delta of a run's live stream, with its call: its ``offset`` (strictly increasing
    along the run's stream, never reused), the call's idempotency ``key``, ``step`` and
    ``index``, the ``attempt`` that streamed it, the ``delta`` itself (``type``: ``text``,
    ``tool_call``, ``restart``, ``done``...) and when it was written."""

    offset: int
    key: str
    step: str
    index: int
    attempt: int
    delta: JsonValue
    written_at: float


class DeltaPage(BaseModel):
    """The deltas after an offset, oldest first; ``ended``: the run has finished and none
    is left after that offset."""

    deltas: list[Delta]
    ended: bool


@endpoint(router, "GET", "/{run_id}/stream/deltas", permission="read", run_data=True,
          response_model=DeltaPage, problems=(403, 404))
def list_stream_deltas(
    state: State, who: Caller, request: Request, read: Read,
    run_id: Annotated[str, Path(min_length=1, description="The run's id.")],
    after: Annotated[int, Query(ge=0, le=MAX_INT,
                                description="Only deltas after this offset.")] = 0,
    limit: Annotated[int, Query(ge=1, le=PAGE,
                                description="The most deltas answered.")] = PAGE,
) -> DeltaPage:
    """The run's live deltas after an offset, a page at a time, without waiting
    (redacted as ``GET /v1/runs/{run_id}/stream`` redacts them)."""
    read = read.allowed(state, who)
    found, ended = state.client.stream_page(run_id, after, who.tenant_id, limit=limit)
    hide = state.client.redactor(run_id, tenant_id=who.tenant_id, reveal=read.reveal)
    state.record_reads(request, who, [run_id], purpose=read.purpose, revealed=read.reveal)
    return DeltaPage(deltas=[Delta(offset=d.offset, key=d.key, step=d.step, index=d.index,
                                   attempt=d.attempt, delta=hide.json(d.delta),
                                   written_at=d.written_at) for d in found],
                     ended=ended)


def api_frame(d: StreamDelta) -> str:
    """A delta as the API streams it: ``id`` its offset, ``event: delta``, its JSON."""
    return f"id: {d.offset}\nevent: delta\ndata: {json.dumps(d.to_json())}\n\n"


async def live(
    state: ServiceState, who: Principal, run_id: str, after: int, request: Request,
    hide: Redactor, *, frame: Callable[[StreamDelta], str] = api_frame,
    until: float | None = None,
) -> AsyncIterator[str]:
    """Server-Sent Events of the run's deltas after offset ``after``, each redacted by
    ``hide`` and written by ``frame``; ``event: end`` once the run has finished and every
    delta was sent. ``who``'s key is checked after each read and before anything read is
    sent (``until``: when its session ends)."""
    bell = await run_io(state.store, state.store.stream_bell)
    quiet = 0.0
    try:
        while not await request.is_disconnected():
            found, ended = await run_io(state.store, partial(
                state.client.stream_page, run_id, after, who.tenant_id))
            refused = await run_io(state.store, partial(
                still_authorized, state.store, who, "read", until=until))
            if refused is not None:
                yield f"event: unauthorized\ndata: {json.dumps({'detail': refused})}\n\n"
                return
            for d in found:
                after = d.offset
                yield frame(StreamDelta(d.offset, d.key, d.step, d.index, d.attempt,
                                        hide.json(d.delta), d.written_at))
            if found:
                quiet = 0.0
                continue
            if ended:
                yield f"event: end\ndata: {json.dumps({'offset': after})}\n\n"
                return
            if quiet >= KEEPALIVE_S:
                quiet = 0.0
                yield ": keep-alive\n\n"
            began = state.client.clock.now()
            await bell.wait(run_id, WAIT_S)
            quiet += max(0.0, state.client.clock.now() - began)
    finally:
        await bell.close()
