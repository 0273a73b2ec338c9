"""``/v1/runs``: list, read, start and steer runs — each a call of the client, in the key's
tenant (another tenant's run is a 404, like a missing one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from ..apikeys import Permission
from ..client import RunFilter, redact_request, waiting_words
from ..control import CHILD
from ..errors import ConfigurationError, ConflictError, InvalidInput, ResidencyError
from ..inputs import MAX_INT, MAX_NAME
from ..journal.state import APPROVAL_SIGNAL
from ..labels import MAX_LABELS, check_key, check_labels, parse_labels
from ..redaction import Redactor
from ..store._offload import run_io
from ..store.base import FINAL, AccessRecord, RunRecord, SignalRecord
from ._auth import Caller, Principal, ServiceState, State, endpoint
from ._inputs import CheckedRoute
from ._models import (
    Accepted,
    AnswerMark,
    Cancel,
    Event,
    Forked,
    ForkRun,
    Pending,
    Resolve,
    Resume,
    RunDetail,
    RunPage,
    RunStatus,
    RunSummary,
    SendSignal,
    Started,
    StartRun,
    WaitingOn,
)
from ._problems import ApiProblem, conflict, invalid, invalid_input
from ._reading import Read, Reading

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=CheckedRoute)

RunId = Annotated[str, Path(min_length=1, description="The run's id.")]
CURSOR_PATTERN = r"^[A-Za-z0-9_\-]+$"
"""A runs page's cursor: base64url, as ``next_cursor`` gives it."""
CURSOR_MAX = 600
UNSIGNED = ("unsigned: a worker started with --signed-resolutions refuses it; submit a "
            "signed resolve decision to /v1/approvals/{run_id}/decision instead")


async def run_query(
    status: RunStatus | None = None,
    flow: Annotated[str | None, Query(min_length=1)] = None,
    created_since: float | None = None,
    created_until: float | None = None,
    updated_since: float | None = None,
    updated_until: float | None = None,
    q: Annotated[str | None, Query(min_length=1, max_length=200,
                                   description="A substring of the run id or flow.")] = None,
    label: Annotated[list[str] | None, Query(
        max_length=MAX_LABELS, description="Only runs with this label, as name=value; "
        "repeat it and all must match. A value matches by its text.")] = None,
) -> RunFilter:
    """The runs filter a request's query names: what ``GET /v1/runs`` lists and a bulk
    operation acts on (:mod:`underway.service._bulk`).

    Args:
        status: Only runs with this status.
        flow: Only runs of this flow.
        created_since: Only runs created at or after it.
        created_until: Only runs created before it.
        updated_since: Only runs last updated at or after it.
        updated_until: Only runs last updated before it.
        q: Only runs whose id or flow contains it.
        label: Only runs with every one of these labels (``name=value``).
    """
    return RunFilter(status=None if status is None else status.value, flow=flow,
                     since=created_since, until=created_until, updated_since=updated_since,
                     updated_until=updated_until, search=q,
                     labels=parse_labels(label or (), field="query.label") or None)


RunQuery = Annotated[RunFilter, Depends(run_query)]
"""A request's runs filter, read from its query."""


@endpoint(router, "GET", "", permission="read", response_model=RunPage)
def list_runs(
    state: State, who: Caller, chosen: RunQuery,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(min_length=1, max_length=CURSOR_MAX,
                                        pattern=CURSOR_PATTERN)] = None,
    id_prefix: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME,
                                           description="Only runs whose id starts with "
                                           "it.")] = None,
) -> RunPage:
    """A page of the tenant's runs, newest first, filtered, with their labels (a
    sensitive label's value reads ``[redacted]``)."""
    try:
        page = state.client.list_runs(tenant_id=who.tenant_id, limit=limit, cursor=cursor,
                                      id_prefix=id_prefix, **chosen.keywords())
    except ConfigurationError as exc:
        raise invalid("query.cursor", str(exc)) from None
    labels = state.client.run_labels([r.run_id for r in page.runs], tenant_id=who.tenant_id)
    runs = [RunSummary.of(r, labels.get(r.run_id)).model_copy(
        update={"waiting": state.client.waiting_on(r)}) for r in page.runs]
    return RunPage(runs=runs, next_cursor=page.next_cursor)


@endpoint(router, "POST", "", permission="steer", response_model=Started, status_code=201,
          responses={200: {"model": Started, "description": "Found by its idempotency key"}})
def start_run(
    state: State, who: Caller, body: StartRun, response: Response,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
    traceparent: Annotated[str | None, Header(max_length=200)] = None,
    tracestate: Annotated[str | None, Header(max_length=1000)] = None,
) -> Started:
    """Start a run of a flow by name (201), or find the one this ``Idempotency-Key``
    started (200). A W3C ``traceparent`` (and ``tracestate``) is journaled with the run:
    its spans join the caller's trace."""
    carrier = {k: v for k, v in (("traceparent", traceparent), ("tracestate", tracestate))
               if v is not None}
    labels = check_labels(body.labels, field="body.labels")
    hidden = [check_key(k, field="body.sensitive_labels") for k in body.sensitive_labels]
    try:
        run_id, created = state.client.start(
            body.flow, body.input, tenant_id=who.tenant_id, idempotency_key=idempotency_key,
            queue=body.queue, start_at=body.start_at, deadline=body.deadline,
            trace_context=carrier if traceparent is not None else None, subject=body.subject,
            purpose=body.purpose, consent=body.consent, labels=labels,
            sensitive_labels=hidden,
        )
    except InvalidInput as exc:
        if exc.field != "input":
            raise  # a value no run can hold, named where it is in the body
        # The input does not fit the flow's model: each field, under body.input.
        raise ApiProblem.answering(invalid_input(exc, within=("body",))) from None
    except ResidencyError:
        raise
    except ConfigurationError as exc:
        field = "body.flow" if "not registered" in str(exc) else "body.input"
        raise invalid(field, str(exc)) from None
    if not created:
        response.status_code = 200
    return Started(run_id=run_id, created=created)


@dataclass(frozen=True, slots=True)
class Route:
    """An endpoint's method and path (as the access log names it) and permission, where
    :mod:`underway.service._fast` needs them too."""

    method: str
    path: str
    permission: Permission

    @property
    def name(self) -> str:
        """``GET /v1/runs/{run_id}``."""
        return f"{self.method} {router.prefix}{self.path}"


GET_RUN = Route("GET", "/{run_id}", "read")
SEND_SIGNAL = Route("POST", "/{run_id}/signals", "steer")


@endpoint(router, GET_RUN.method, GET_RUN.path, permission=GET_RUN.permission, run_data=True,
          response_model=RunDetail, problems=(403, 404))
async def get_run(state: State, who: Caller, run_id: RunId, request: Request,
                  read: Read) -> Response:
    """The run: its row, the step it is at, and what it waits on (what its tools hide
    redacted unless ``reveal``)."""
    read = read.allowed(state, who)
    where = state.endpoint_of(request)
    # One trip to the store's thread, answered as JSON bytes: the model is the document's.
    body, logged = await run_io(state.store, run_detail, state, who, run_id, read, where)
    await state.writes.log_access(logged)  # durable before the answer leaves
    return Response(body, media_type="application/json")


def run_detail(state: ServiceState, who: Principal, run_id: str, read: Reading,
               where: str) -> tuple[bytes, list[AccessRecord]]:
    """:func:`get_run`'s reads: its answer serialized, and the access-log entries to
    write, durably, before it is sent."""
    row = state.client.get_run(run_id, tenant_id=who.tenant_id)
    labels = state.client.run_labels([run_id], tenant_id=who.tenant_id, reveal=read.reveal)
    # What the run's tools hide is learned from its journal: read only when something
    # shown could hold it (labels, an error, a person's request).
    hide = _Hiding(state, run_id, who.tenant_id, read.reveal)
    waiting = waiting_on(state, row, hide)
    found = dict(labels.get(run_id, {}))
    shown = hide.json(found) if found else found
    summary = RunSummary.of(row, shown if isinstance(shown, dict) else None).model_copy(
        update={"error": hide.text(row.error) if row.error else row.error,
                "waiting": waiting.text if waiting is not None else None})
    marks = state.client.marks(row)
    detail = RunDetail(**summary.model_dump(), waiting_on=waiting,
                       tainted_by=state.client.tainted_by(row),
                       marks=None if marks is None else [AnswerMark.model_validate(m)
                                                         for m in marks])
    logged = state.reads(who, where, [run_id], purpose=read.purpose, revealed=read.reveal)
    return detail.model_dump_json().encode(), logged


class _Hiding:
    """The run's :class:`~underway.redaction.Redactor` (as the client makes it), made on
    first use."""

    def __init__(self, state: ServiceState, run_id: str, tenant_id: str, reveal: bool) -> None:
        self._made: Redactor | None = None
        self._args = (state, run_id, tenant_id, reveal)

    def _redactor(self) -> Redactor:
        if self._made is None:
            state, run_id, tenant_id, reveal = self._args
            self._made = state.client.redactor(run_id, tenant_id=tenant_id, reveal=reveal)
        return self._made

    def json(self, value: Any) -> Any:
        """:meth:`Redactor.json`."""
        return self._redactor().json(value)

    def text(self, value: str) -> str:
        """:meth:`Redactor.text`."""
        return self._redactor().text(value)

    def hider(self) -> Redactor:
        """The redactor itself."""
        return self._redactor()


def waiting_on(state: ServiceState, row: RunRecord, hide: Redactor | _Hiding
               ) -> WaitingOn | None:
    """What the run ``row`` waits on (None once it is finished): a person's request (as
    ``hide`` lets the viewer see it), a worker, a child, a signal or a timer. It reads the
    store (call it off the loop)."""
    if row.status in FINAL:
        return None
    # Only a person's request needs the folded state; the row says the rest.
    text = waiting_words(row, None) or ""
    if row.status in ("escalated", "dead") or row.waiting_signal == APPROVAL_SIGNAL:
        request = state.client.pending_request(row.run_id, tenant_id=row.tenant_id)
        if request is not None:
            return WaitingOn(kind=request.kind, text=waiting_words(row, request) or "",
                             request=Pending.of(redact_request(
                                 request, redactor=hide.hider() if isinstance(hide, _Hiding)
                                 else hide)))
    if row.status == "ready":
        return WaitingOn(kind="worker", text=text, until=row.next_wake_at)
    if row.waiting_signal == CHILD:
        return WaitingOn(kind="child", text=text, until=row.next_wake_at)
    if row.waiting_signal is not None:
        return WaitingOn(kind="signal", text=text, signal=row.waiting_signal,
                         until=row.next_wake_at)
    return WaitingOn(kind="timer", text=text, until=row.next_wake_at)


@endpoint(router, "GET", "/{run_id}/events", permission="read", run_data=True,
          response_model=list[Event], problems=(403, 404))
def list_events(
    state: State, who: Caller, run_id: RunId, request: Request, read: Read,
    after: Annotated[int, Query(ge=0, le=MAX_INT,
                                description="Only events with a higher seq.")] = 0,
    limit: Annotated[int | None, Query(ge=0, le=MAX_INT,
                                       description="Only the first N of them.")] = None,
) -> list[Event]:
    """The run's journaled events, decoded, in order; the fields their tools hide
    redacted (``"[redacted]"``) unless ``reveal``."""
    read = read.allowed(state, who)
    found = state.client.events(run_id, tenant_id=who.tenant_id, after=after, limit=limit)
    hide = (Redactor(reveal=read.reveal).learn(e.event for e in found) if after == 0 else
            state.client.redactor(run_id, tenant_id=who.tenant_id, reveal=read.reveal))
    state.record_reads(request, who, [run_id], purpose=read.purpose, revealed=read.reveal)
    return [Event.of(e, hide) for e in found]


@endpoint(router, SEND_SIGNAL.method, SEND_SIGNAL.path, permission=SEND_SIGNAL.permission,
          response_model=Accepted, status_code=202, problems=(404,))
async def send_signal(state: State, who: Caller, run_id: RunId, body: SendSignal) -> Response:
    """Deliver a signal (once per ``signal_id``); a name the run's flow does not declare
    is refused."""
    record, status = await run_io(state.store, signal_run, state, who, run_id, body)
    delivered = await state.writes.send_signal(record)
    return Response(signal_answer(run_id, status, delivered), status_code=202,
                    media_type="application/json")


def signal_run(state: ServiceState, who: Principal, run_id: str, body: SendSignal
               ) -> tuple[SignalRecord, str]:
    """:func:`send_signal`'s reads and checks: the signal's inbox row to write, and the
    run's status."""
    row = state.client.get_run(run_id, tenant_id=who.tenant_id)
    try:
        record = state.client.prepared_signal(row, body.name, body.payload,
                                              tenant_id=who.tenant_id,
                                              signal_id=body.signal_id, sender=who.actor)
    except ConfigurationError as exc:
        raise invalid("body.name", str(exc)) from None
    return record, row.status


def signal_answer(run_id: str, status: str, delivered: bool) -> bytes:
    """:func:`send_signal`'s answer, serialized."""
    note = f"run is {status} and will not read it" if status in FINAL else ""
    return Accepted(run_id=run_id, delivered=delivered, note=note).model_dump_json().encode()


@endpoint(router, "POST", "/{run_id}/cancel", permission="steer", response_model=Accepted,
          status_code=202, problems=(404, 409))
def cancel_run(state: State, who: Caller, run_id: RunId, body: Cancel) -> Accepted:
    """Cancel the run at its next step boundary."""
    row = state.client.get_run(run_id, tenant_id=who.tenant_id)
    if row.status in FINAL:
        raise conflict(f"run {run_id} is already {row.status}; nothing to cancel")
    delivered = state.client.cancel(run_id, by=who.actor, reason=body.reason,
                                    tenant_id=who.tenant_id, signal_id=body.signal_id)
    return Accepted(run_id=run_id, delivered=delivered)


@endpoint(router, "POST", "/{run_id}/resume", permission="steer", response_model=Accepted,
          status_code=202, problems=(404, 409))
def resume_run(state: State, who: Caller, run_id: RunId, body: Resume) -> Accepted:
    """Resume a dead run (unsigned; see ``note``). Where runs settle only with signed
    resolutions, a 409 says how to sign one."""
    row = state.client.get_run(run_id, tenant_id=who.tenant_id)
    try:
        delivered = state.client.resume(run_id, by=who.actor, step=body.step,
                                        tenant_id=who.tenant_id, signal_id=body.signal_id)
    except ConfigurationError as exc:
        if row.status != "dead":
            raise conflict(str(exc)) from None
        raise invalid("body.step", str(exc)) from None
    return Accepted(run_id=run_id, delivered=delivered, note=UNSIGNED)


@endpoint(router, "POST", "/{run_id}/resolve", permission="steer", response_model=Accepted,
          status_code=202, problems=(404, 409))
def resolve_run(state: State, who: Caller, run_id: RunId, body: Resolve) -> Accepted:
    """Resolve an escalated run (unsigned; see ``note``). Where runs settle only with
    signed resolutions, a 409 says how to sign one."""
    try:
        delivered = state.client.resolve(run_id, resolution=body.resolution, by=who.actor,
                                         result=body.result, tenant_id=who.tenant_id,
                                         signal_id=body.signal_id)
    except ConfigurationError as exc:  # the run is not escalated
        raise conflict(str(exc)) from None
    return Accepted(run_id=run_id, delivered=delivered, note=UNSIGNED)


@endpoint(router, "POST", "/{run_id}/fork", permission="steer", response_model=Forked,
          status_code=201, problems=(404, 409))
def fork_run(state: State, who: Caller, run_id: RunId, body: ForkRun) -> Forked:
    """Start a new run from the run's state at one of its events (for recovery or a
    what-if; see ``underway runs fork``). A 409 while a worker holds the run: fork it
    once handed back."""
    try:
        made = state.client.fork(run_id, at_seq=body.at_seq, by=who.actor,
                                 reason=body.reason, step=body.step,
                                 state_patch=body.state_patch, tenant_id=who.tenant_id)
    except ConflictError as exc:
        raise ApiProblem(409, "run-busy", "Run busy", str(exc)) from None
    return Forked(run_id=made.run_id, parent_run_id=made.parent_run_id, seq=made.seq,
                  step=made.step, parent_step=made.parent_step,
                  parent_status=made.parent_status, redone=list(made.redone),
                  notes=list(made.notes))
