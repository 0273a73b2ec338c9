"""``/runs/{run_id}``: one run — its facts (flow, status, step, what it waits on, times,
idempotency key, children, a pending request; ``/runs/{run_id}/facts`` for the page's
script once the run's status changes), its overview (a Gantt chart of its step attempts
with their workers, calls and waits, and the graph of its steps: :mod:`._overview`), its
events a page of :data:`~._events.PAGE` at a time (the newest page unless another is asked for),
the state after any event with the patch that event made (``?at=SEQ``, or
``/runs/{run_id}/state?at=SEQ`` for the page's script), a live tail of new events
while the run moves (``/runs/{run_id}/events/stream``, the API's tail with the session's
cookie and frames the page inserts as they are), and the tokens of the model calls it
streams as they arrive (``/runs/{run_id}/stream``, the API's live stream likewise).

Another tenant's run is the same 404 page as a missing one. Every answer that carries the
run's data appends its access-log entry first, as the API's reads do, with the page's
``purpose``; what the run's tools hide is redacted unless ``reveal`` is asked for by a role
that may (:mod:`underway.redaction`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from markupsafe import Markup

from ...client import ChildRun, Recorded, RunEvent, RunState
from ...codec import ENCRYPTED
from ...errors import ConfigurationError, KeyUnavailable, RunNotFound
from ...events import JSON, PURGED
from ...ops.overview import overview
from ...ops.timeline import preview, type_of
from ...redaction import Redactor
from ...store._offload import run_io
from ...store.access import DEFAULT_PURPOSE
from ...store.base import FINAL, RunRecord
from .._auth import Principal, ServiceState
from .._inputs import CheckedRoute
from .._live import live
from .._models import WaitingOn
from .._runs import waiting_on
from .._stream import tail
from ._base import Console, Purpose, ReadAs, Reveal, Signed, fragment, not_found, read_as, render
from ._events import PAGE, EventView, StateAt, state_at, views
from ._overview import Chart, chart, graph_svg
from ._run_actions import NOTICES

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

STILL = (*FINAL, "dead")
"""Statuses in which a run does not move until someone acts: its page does not tail it."""

RunId = Annotated[str, Path(min_length=1, max_length=200)]
Seq = Annotated[int | None, Query(ge=1, le=2**62)]
OVERVIEW_EVENTS = 1_000
"""The newest events the overview reads at most (the event log pages hold the rest)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """The facts card: the run's row, its folded state, what it waits on and its children
    (redacted for its viewer)."""

    row: RunRecord
    folded: RunState
    waiting: WaitingOn | None
    children: list[ChildRun]
    hide: Redactor

    @property
    def result(self) -> str:
        """The run's result, on one line (``[purged]`` once retention purged it)."""
        if self.folded.purged:
            return PURGED
        return preview(self.hide.json(self.folded.result), 300)

    @property
    def error(self) -> str:
        """The run's error, if any."""
        return self.hide.text(self.folded.error or "")

    @property
    def marks(self) -> list[MarkedPart]:
        """The parts of the run's result that trusted sources do not account for, each
        with what it holds as the viewer may see it (none once the result was purged)."""
        if self.folded.purged:
            return []
        parts = []
        for m in self.folded.marks:
            found, value = _part(self.folded.result, str(m.get("path", "")))
            sources = m.get("sources")
            parts.append(MarkedPart(
                str(m.get("path", "")),
                [str(x) for x in sources] if isinstance(sources, list) else [],
                m.get("repeats") is True,
                preview(self.hide.json(value), 300) if found else None))
        return parts


@dataclass(frozen=True, slots=True)
class MarkedPart:
    """A marked part of a run's result as the run page shows it."""

    path: str
    sources: list[str]
    repeats: bool
    shown: str | None
    """What the part holds, redacted for the viewer (None: its path names no part)."""


_STEP = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def _part(result: JSON, path: str) -> tuple[bool, JSON]:
    """The part of ``result`` that a mark's ``path`` names: keys and ``[index]``es from the
    result (``result.items[0]``); a first ``result`` the result has no key for is the
    result itself."""
    steps = [(int(i) if i else None, key) for i, key in _STEP.findall(path)]
    if steps and steps[0] == (None, "result") and not (
            isinstance(result, dict) and "result" in result):
        steps = steps[1:]
    node = result
    for index, key in steps:
        if index is not None and isinstance(node, list) and index < len(node):
            node = node[index]
        elif index is None and isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return False, None
    return True, node


@dataclass(frozen=True, slots=True)
class RunView:
    """What the run page shows, read in one trip to the store (redacted for its viewer)."""

    row: RunRecord
    folded: RunState
    waiting: WaitingOn | None
    children: list[ChildRun]
    events: list[EventView]
    page: int
    pages: int
    head: int
    picked: StateAt | None
    picked_error: str
    hide: Redactor
    chart: Chart
    graph: Markup
    overview_from: int
    """The first seq the overview covers (1 unless the run is longer than it reads)."""
    declared: bool
    """Whether the graph's steps are the flow's declared ones (this server has its code)."""

    @property
    def facts(self) -> Facts:
        """What the facts card shows."""
        return Facts(self.row, self.folded, self.waiting, self.children, self.hide)

    @property
    def live(self) -> bool:
        """Whether the page tails new events: the run moves on by itself (it is neither
        finished nor dead, which waits for an operator) and this is the newest page."""
        return self.row.status not in STILL and self.page == self.pages


@router.get("/runs/{run_id}")
async def run_page(request: Request, state: Console, session: Signed, run_id: RunId,
                   page: Seq = None, at: Seq = None,
                   done: Annotated[str, Query(max_length=30)] = "",
                   purpose: Purpose = DEFAULT_PURPOSE, reveal: Reveal = False) -> HTMLResponse:
    """The run's page (``done``: the operator action just sent, which it confirms)."""
    rd = read_as(state, session, purpose, reveal)
    view = await run_io(state.store, _read, state, request, session.principal, run_id,
                        page, at, rd)
    if view is None:
        return not_found(request, session, "run")
    last_seq = view.events[-1].seq if view.events else (view.page - 1) * PAGE
    keep = f"&{rd.query}" if rd.query else ""
    return render(request, "run.html", {
        "nav": "runs", "v": view, "row": view.row, "run_id": run_id, "page_size": PAGE,
        "stream": f"/runs/{run_id}/events/stream?after={last_seq}{keep}" if view.live else "",
        "tokens": f"/runs/{run_id}/stream{'?' + rd.query if rd.query else ''}"
                  if view.live else "",
        "state_url": f"/runs/{run_id}/state" + (f"?{rd.query}" if rd.query else ""),
        "facts_url": f"/runs/{run_id}/facts" + (f"?{rd.query}" if rd.query else ""),
        "may_steer": session.may("steer"), "notice": NOTICES.get(done, ""), "rd": rd,
        "signed_only": state.signed_resolutions,
        "keep": keep,
    }, session=session)


@router.get("/runs/{run_id}/facts")
async def facts(request: Request, state: Console, session: Signed, run_id: RunId,
                purpose: Purpose = DEFAULT_PURPOSE, reveal: Reveal = False) -> Response:
    """The run's facts as the page shows them, for its script to put in place once the
    run's status changes (so what it waits on keeps its links)."""
    rd = read_as(state, session, purpose, reveal)
    found = await run_io(state.store, _facts_read, state, request, session.principal,
                         run_id, rd)
    if found is None:
        return JSONResponse({"detail": "no run in this tenant"}, status_code=404)
    html = fragment("_facts.html", {"f": found})
    return Response(html, media_type="text/html", headers={"Cache-Control": "no-store"})


@router.get("/runs/{run_id}/state")
async def state_json(request: Request, state: Console, session: Signed, run_id: RunId,
                     at: Annotated[int, Query(ge=1, le=2**62)],
                     purpose: Purpose = DEFAULT_PURPOSE, reveal: Reveal = False) -> Response:
    """The state after event ``at`` and the patch it made, as JSON (for the page's
    script; the page itself shows the same with ``?at=``)."""
    rd = read_as(state, session, purpose, reveal)
    found = await run_io(state.store, _picked_read, state, request, session.principal,
                         run_id, at, rd)
    if found is None:
        return JSONResponse({"detail": "no run in this tenant"}, status_code=404)
    if isinstance(found, str):
        return JSONResponse({"detail": found}, status_code=422)
    return Response(json.dumps(found.to_json(), default=str), media_type="application/json",
                    headers={"Cache-Control": "no-store"})


@router.get("/runs/{run_id}/events/stream")
async def event_stream(
    request: Request, state: Console, session: Signed, run_id: RunId,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=30)] = None,
    purpose: Purpose = DEFAULT_PURPOSE, reveal: Reveal = False,
) -> Response:
    """New events of the run as Server-Sent Events, each a timeline entry ready to
    insert; ``event: status`` when its status changes; ``event: end`` once it is done."""
    who = session.principal
    rd = read_as(state, session, purpose, reveal)
    hide = await run_io(state.store, _stream_read, state, request, who, run_id, rd)
    if hide is None:
        return not_found(request, session, "run")
    if last_event_id is not None and last_event_id.strip().isdigit():
        after = max(after, int(last_event_id))
    keep = f"&{rd.query}" if rd.query else ""
    return StreamingResponse(
        tail(state, who, run_id, after, request, hide, status=True,
             frame=partial(_frame, run_id, keep), until=session.expires_at),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get("/runs/{run_id}/stream")
async def token_stream(
    request: Request, state: Console, session: Signed, run_id: RunId,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    last_event_id: Annotated[str | None, Header(max_length=30)] = None,
    purpose: Purpose = DEFAULT_PURPOSE, reveal: Reveal = False,
) -> Response:
    """The run's live stream (the deltas of its streamed model calls) as Server-Sent
    Events, as the API sends them; ``event: end`` once the run is done."""
    who = session.principal
    rd = read_as(state, session, purpose, reveal)
    hide = await run_io(state.store, _stream_read, state, request, who, run_id, rd)
    if hide is None:
        return not_found(request, session, "run")
    if last_event_id is not None and last_event_id.strip().isdigit():
        after = max(after, int(last_event_id))
    return StreamingResponse(
        live(state, who, run_id, after, request, hide, until=session.expires_at),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _frame(run_id: str, keep: str, e: RunEvent) -> str:
    html = fragment("run_event.html", {"e": views([e])[0], "run_id": run_id, "keep": keep})
    data = json.dumps({"seq": e.seq, "type": type_of(e.event), "html": html})
    return f"id: {e.seq}\ndata: {data}\n\n"


# -- reads, each one trip to the store's I/O threads ----------------------------------------
def _read(state: ServiceState, request: Request, who: Principal, run_id: str,
          page: int | None, at: int | None, rd: ReadAs) -> RunView | None:
    client, tenant = state.client, who.tenant_id
    try:
        row = client.get_run(run_id, tenant_id=tenant)
    except RunNotFound:
        return None
    hide = client.redactor(run_id, tenant_id=tenant, reveal=rd.reveal)
    recent = client.events(run_id, tenant_id=tenant,
                           after=max(0, row.last_seq - OVERVIEW_EVENTS))
    events, page = _page(state, row, page, recent)
    head = max(row.last_seq, events[-1].seq if events else 0, recent[-1].seq if recent else 0)
    folded = client.readable_state(run_id, tenant_id=tenant)
    children = client.children(run_id, tenant_id=tenant) if folded.children else []
    picked, error = None, ""
    if at is not None:
        picked, error = _picked(state, row, at, hide)
    shown = {e.seq: RunEvent(e.seq, e.at, hide.event(e.event), e.hash) for e in recent}
    page_shown = [shown.get(e.seq) or RunEvent(e.seq, e.at, hide.event(e.event), e.hash)
                  for e in events]
    flow = client.flows.get(row.flow)
    seen = overview([Recorded(e.seq, e.at, e.event) for e in shown.values()],
                    now=client.clock.now() if row.status not in STILL else None,
                    declared=list(flow.steps) if flow is not None else ())
    view = RunView(row, folded, waiting_on(state, row, hide), children, views(page_shown),
                   page, max((head - 1) // PAGE + 1, page, 1), head, picked, error, hide,
                   chart(seen), graph_svg(seen.graph), recent[0].seq if recent else 1,
                   flow is not None)
    state.record_reads(request, who, [run_id], purpose=rd.purpose, revealed=rd.reveal)
    return view


def _page(state: ServiceState, row: RunRecord, page: int | None,
          recent: list[RunEvent]) -> tuple[list[RunEvent], int]:
    """The events of timeline page ``page`` (None: the newest) and its number, from the
    ``recent`` events read for the overview when they hold the page."""
    # The row's head may lag a step in flight: the journal read says how far it goes.
    head = max(row.last_seq, recent[-1].seq if recent else 0, 1)
    if page is None:
        page = (head - 1) // PAGE + 1
    base = (page - 1) * PAGE
    if recent and recent[0].seq <= base + 1:
        return [e for e in recent if base < e.seq <= base + PAGE], page
    return state.client.events(row.run_id, tenant_id=row.tenant_id, after=base,
                               limit=PAGE), page


def _picked(state: ServiceState, row: RunRecord | tuple[str, str], at: int,
            hide: Redactor) -> tuple[StateAt | None, str]:
    """The state at ``at`` of a run (its row, or its (tenant, run id))."""
    tenant_id, run_id = (row.tenant_id, row.run_id) if isinstance(row, RunRecord) else row
    try:
        before, rec, after = state.client.state_at(run_id, at, tenant_id=tenant_id)
    except ConfigurationError as exc:
        return None, str(exc)
    except KeyUnavailable:
        return None, f"the run's payloads are {ENCRYPTED}: this server has no key to open them"
    return state_at(before, rec, after, hide), ""


def _picked_read(state: ServiceState, request: Request, who: Principal, run_id: str,
                 at: int, rd: ReadAs) -> StateAt | str | None:
    # No read of the runs row: the redactor (of a run it has not seen) and the state both
    # find an unknown run, or one of another tenant, missing.
    try:
        hide = state.client.redactor(run_id, tenant_id=who.tenant_id, reveal=rd.reveal)
        picked, error = _picked(state, (who.tenant_id, run_id), at, hide)
    except RunNotFound:
        return None
    if picked is None:
        return error
    state.record_reads(request, who, [run_id], purpose=rd.purpose, revealed=rd.reveal)
    return picked


def _facts_read(state: ServiceState, request: Request, who: Principal, run_id: str,
                rd: ReadAs) -> Facts | None:
    client = state.client
    try:
        row = client.get_run(run_id, tenant_id=who.tenant_id)
    except RunNotFound:
        return None
    hide = client.redactor(run_id, tenant_id=who.tenant_id, reveal=rd.reveal)
    folded = client.readable_state(run_id, tenant_id=who.tenant_id)
    children = client.children(run_id, tenant_id=who.tenant_id) if folded.children else []
    found = Facts(row, folded, waiting_on(state, row, hide), children, hide)
    state.record_reads(request, who, [run_id], purpose=rd.purpose, revealed=rd.reveal)
    return found


def _stream_read(state: ServiceState, request: Request, who: Principal, run_id: str,
                 rd: ReadAs) -> Redactor | None:
    if state.store.get_run(who.tenant_id, run_id) is None:
        return None
    hide = state.client.redactor(run_id, tenant_id=who.tenant_id, reveal=rd.reveal)
    state.record_reads(request, who, [run_id], purpose=rd.purpose, revealed=rd.reveal)
    return hide
