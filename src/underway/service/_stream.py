"""``GET /v1/runs/{run_id}/events/stream``: a live tail of a run's journal as Server-Sent
Events. Each event is sent as ``id: <seq>``, ``event: <type>``, ``data: <JSON>``; a client
that reconnects with ``Last-Event-ID`` goes on after it. The stream ends (``event: end``)
once the run is finished and every event was sent, or when the client goes away. Before
each poll's frames leave, the key is looked up again (:func:`~._auth.still_authorized`):
once it is revoked (or its session expired) the stream sends ``event: unauthorized`` and
ends, with nothing read after the revocation. The console's run page tails a run through
the same :func:`tail`, with its own frames and its session's expiry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import StreamingResponse

from ..client import RunEvent
from ..inputs import MAX_INT, InvalidInput, integer
from ..redaction import Redactor
from ..store._offload import run_io
from ..store.base import FINAL
from ._auth import Caller, Principal, ServiceState, State, endpoint, still_authorized
from ._inputs import CheckedRoute
from ._models import Event
from ._reading import Read

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=CheckedRoute)

NOTHING_HIDDEN = Redactor(reveal=True)
"""A redactor that has learned nothing: for events already redacted."""
POLL_S = 0.25
"""How often the server looks for new events of a streamed run."""
KEEPALIVE_S = 15.0
"""A comment line at least this often, so proxies keep the connection and a client that
went away is noticed."""

_DOC = {200: {"description": "Server-Sent Events: one per journaled event, then `end`",
              "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


@endpoint(router, "GET", "/{run_id}/events/stream", permission="read", run_data=True,
          problems=(403, 404), response_class=StreamingResponse, responses=_DOC)
async def stream_events(
    state: State, who: Caller, request: Request, read: Read,
    run_id: Annotated[str, Path(min_length=1)],
    after: Annotated[int, Query(ge=0, le=MAX_INT, description="Start after this seq.")] = 0,
    last_event_id: Annotated[str | None, Header(description="The last seq received.")] = None,
) -> StreamingResponse:
    """Tail the run's events as they are journaled (redacted as
    ``GET /v1/runs/{run_id}/events`` redacts them)."""
    return await sse_of_run(state, who, request, read, run_id, after, last_event_id, tail)


Follow = Callable[[ServiceState, Principal, str, int, Request, Redactor], AsyncIterator[str]]
"""What an SSE endpoint sends: the frames of a run after a position, redacted by ``hide``."""


async def sse_of_run(state: ServiceState, who: Principal, request: Request, read: Read,
                     run_id: str, after: int, last_event_id: str | None,
                     follow: Follow) -> StreamingResponse:
    """The SSE answer of a run's stream: the caller may read the run (404 otherwise), its
    ``Last-Event-ID`` resumes after ``after``, the read is in the access log, and the
    frames of ``follow`` are redacted for the caller.

    Args:
        state: The service.
        who: The caller.
        request: The request (to notice a client that left).
        read: The caller's read options (purpose, reveal).
        run_id: The run.
        after: The position to start after.
        last_event_id: The header a reconnecting client sends.
        follow: Makes the frames.
    """
    read = read.allowed(state, who)
    await run_io(state.store, partial(state.client.get_run, run_id, tenant_id=who.tenant_id))
    if last_event_id is not None:
        after = max(after, header_seq("header.last-event-id", last_event_id))
    hide = await run_io(state.store, partial(
        state.client.redactor, run_id, tenant_id=who.tenant_id, reveal=read.reveal))
    await run_io(state.store, partial(state.record_reads, request, who, [run_id],
                                      purpose=read.purpose, revealed=read.reveal))
    return StreamingResponse(
        follow(state, who, run_id, after, request, hide),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def header_seq(field: str, value: str) -> int:
    """A sequence number or offset sent as text (``Last-Event-ID``): digits, at most
    :data:`~underway.inputs.MAX_INT`."""
    digits = value.strip()
    if not digits.isascii() or not digits.isdigit():
        raise InvalidInput(field, "must be a seq or an offset (digits), as the stream sent it")
    return integer(field, int(digits[:20]), minimum=0)


def api_frame(e: RunEvent) -> str:
    """An event as the API streams it: ``id`` its seq, ``event`` its type, ``data`` the
    event as ``GET /v1/runs/{run_id}/events`` shows it (already redacted by :func:`tail`)."""
    out = Event.of(e, NOTHING_HIDDEN)
    return f"id: {out.seq}\nevent: {out.type}\ndata: {out.model_dump_json()}\n\n"


async def tail(
    state: ServiceState, who: Principal, run_id: str, seq: int, request: Request,
    hide: Redactor, *, frame: Callable[[RunEvent], str] = api_frame, status: bool = False,
    until: float | None = None,
) -> AsyncIterator[str]:
    """Server-Sent Events of the run's events after ``seq``, each redacted by ``hide``
    (which learns each new batch before any of it is shown) and written by ``frame``, as
    they are journaled; ``event: end`` once the run is finished and every event was sent.
    With ``status``, an ``event: status`` (the row's status, step, awaited signal and
    ``waiting``, what it waits on in words)
    whenever the row says something new while no event arrives. ``who``'s key is checked
    after each read and before anything read is sent (``until``: when its session
    ends); once it may no longer read, ``event: unauthorized`` and the stream ends."""
    quiet = 0.0
    shown: dict[str, str | None] = {}
    tenant_id = who.tenant_id
    while not await request.is_disconnected():
        found = await run_io(state.store, partial(
            state.client.events, run_id, tenant_id=tenant_id, after=seq))
        row = None if found else await run_io(state.store, state.store.get_run, tenant_id,
                                              run_id)
        # Read first, then ask: whatever was read while the key held may go, nothing else.
        refused = await run_io(state.store, partial(still_authorized, state.store, who,
                                                    "read", until=until))
        if refused is not None:
            yield f"event: unauthorized\ndata: {json.dumps({'detail': refused})}\n\n"
            return
        hide.learn(e.event for e in found)
        for e in found:
            seq = e.seq
            yield frame(RunEvent(e.seq, e.at, hide.event(e.event), e.hash))
        if found:
            quiet = 0.0
            continue
        if row is None or (row.status in FINAL and row.last_seq <= seq):
            ended = row.status if row is not None else None
            yield f"event: end\ndata: {json.dumps({'status': ended, 'seq': seq})}\n\n"
            return
        now: dict[str, str | None] = {"status": row.status, "step": row.step,
                                      "signal": row.waiting_signal}
        if status and now != shown:
            shown = now
            # What it waits on, in words, read only when the row changed.
            words = await run_io(state.store, state.client.waiting_on, row)
            yield f"event: status\ndata: {json.dumps({**now, 'waiting': words})}\n\n"
        quiet += POLL_S
        if quiet >= KEEPALIVE_S:
            quiet = 0.0
            yield ": keep-alive\n\n"
        await asyncio.sleep(POLL_S)
