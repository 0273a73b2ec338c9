"""The client's HTTP transport: runs reached through ``underway serve``'s API with an API key
(:class:`~underway.client.Client` over an ``http://`` or ``https://`` URL).

Each call is one request (a few: a bulk operation with a signer), addressed by path, on one
pooled :class:`httpx.Client`. The API answers in the key's tenant only. A problem it answers
with becomes the exception the database transport raises (:mod:`underway.client._wire`).
Reads come redacted as the key's role allows; a run's state and history are folded here
from its events, by the same code a worker folds them with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from .. import events as ev
from ..clock import Clock
from ..control import CANCEL, RESOLVE, RESUME
from ..errors import ConfigurationError, KeyUnavailable, RunNotFound, ServiceError
from ..events import JSON
from ..flow import Flow
from ..journal import Verification
from ..journal._journal import states_around
from ..journal.state import Recorded, RunState, fold
from ..labels import LabelValue, label_filter
from ..store.base import ApproverRecord, ConsentRecord, RunRecord
from ..store.streams import StreamDelta
from . import _wire
from ._activity import Activity
from ._bulk import _DECISION, BulkItem, BulkResult, RunFilter, _Acting, _Plan, plan_answer
from ._forking import Fork
from ._options import StartOptions
from ._pages import RunEvent, RunPage
from ._requests import PendingRequest

if TYPE_CHECKING:
    import httpx

API_PAGE = 1000
"""The most runs ``GET /v1/runs`` answers with at once."""
STREAM_PAGE = 500
"""The most deltas ``GET /v1/runs/{run_id}/stream/deltas`` answers with at once."""
STREAM_READ_S = 45.0
"""The least a read of an open live stream may wait: the server sends a keep-alive at
least every 15 seconds, so a longer silence is a dead connection."""
DROPS = 3
"""How many times in a row a live stream is reopened after its connection dropped with
nothing new, before the drop is an error."""
_NOT_OVER_HTTP = ("run_id", "principal", "roles", "lineage")
"""Start options the API does not take: it names the run and whom it acts for itself."""


@cache
def _activity() -> TypeAdapter[Activity]:
    """The validator of an activity report, built on first use."""
    return TypeAdapter(Activity)


class HttpTransport:
    """Runs reached through ``underway serve``.

    Args:
        url: The server's base URL.
        api_key: The API key (a bearer token).
        clock: Stamps the client's signed decisions.
        flows: Flows whose code the client has: their input is checked before it is sent.
        timeout: The most seconds one request may take.
        reveal: Ask to see the fields tools declare sensitive.
    """

    remote = True

    def __init__(self, url: str, *, api_key: str, clock: Clock,
                 flows: dict[str, Flow[Any, Any]], timeout: float, reveal: bool) -> None:
        self.where = url.rstrip("/")
        self.clock = clock
        self.flows = flows
        self._reveal = {"reveal": "true"} if reveal else {}
        # httpx loads with an HTTP client only: a database client (the CLI, a worker)
        # never needs it.
        import httpx
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._timeout = timeout
        self._http = httpx.Client(base_url=self.where, timeout=timeout, headers=self._headers)
        self._unreachable = httpx.TransportError
        self._tenant: str | None = None
        self._me: dict[str, Any] | None = None

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def _whoami(self) -> dict[str, Any]:
        """The key's tenant and the server's rules, asked once."""
        if self._me is None:
            self._me = dict(self._json("GET", "/v1/whoami"))
            self._tenant = str(self._me["tenant_id"])
        return self._me

    def tenant(self, tenant_id: str) -> str:
        """The key's tenant: ``default`` stands for it, another is refused."""
        mine = str(self._whoami()["tenant_id"])
        if tenant_id not in ("default", mine):
            raise ConfigurationError(
                f"the API key belongs to tenant {mine!r}; over HTTP a client reaches "
                f"its key's tenant only, not {tenant_id!r}")
        return mine

    def settles_signed_only(self) -> bool:
        """What the server says of itself."""
        return bool(self._whoami()["signed_resolutions"])

    def _call(self, method: str, path: str, *, run_id: str | None = None,
              **kwargs: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)
        except self._unreachable as exc:
            raise ServiceError(self._unreachable_words(exc)) from None
        if r.is_success:
            return r
        raise _wire.error_of(r, self.where, tenant_id=self._tenant, run_id=run_id)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._call(method, path, **kwargs).json()

    # -- writes -------------------------------------------------------------------------
    def start(self, flow: Flow[Any, Any] | str, input: JSON | BaseModel,
              options: StartOptions) -> tuple[str, bool]:
        """``POST /v1/runs``; the input checked here first when the client has the flow."""
        o = options
        given = [n for n in _NOT_OVER_HTTP if getattr(o, n) not in (None, ())]
        if given:
            raise ConfigurationError(
                f"a start over HTTP takes no {', '.join(given)}: the API names the run "
                "and whom it acts for (the API key)")
        name = flow.name if isinstance(flow, Flow) else flow
        code = flow if isinstance(flow, Flow) else self.flows.get(name)
        data: Any = input
        if code is not None:
            data = code.parse_input(input).model_dump(mode="json")
        elif isinstance(input, BaseModel):
            data = input.model_dump(mode="json")
        carried = {k: (o.trace_context or {}).get(k) for k in ("traceparent", "tracestate")}
        headers = {k: v for k, v in {"Idempotency-Key": o.idempotency_key, **carried}.items()
                   if v is not None}
        body = {"flow": name, "input": data, "queue": o.queue, "start_at": o.start_at,
                "deadline": o.deadline, "subject": o.subject, "purpose": o.purpose,
                "consent": o.consent, "labels": dict(o.labels) if o.labels else None,
                "sensitive_labels": list(o.sensitive_labels)}
        found = self._json("POST", "/v1/runs", json=body, headers=headers)
        return str(found["run_id"]), bool(found["created"])

    def signal(self, tenant_id: str, run_id: str, name: str, payload: JSON,
               signal_id: str | None, sender: str | None) -> bool:
        """``POST /v1/runs/{run_id}/signals``: the server checks the name against the
        run's flow (:meth:`Client.check_signal`) and names the key as the sender."""
        body = {"name": name, "payload": payload, "signal_id": signal_id}
        return bool(self._json("POST", f"{_run(run_id)}/signals", json=body,
                               run_id=run_id)["delivered"])

    def control(self, tenant_id: str, run_id: str, action: str, payload: dict[str, JSON],
                signal_id: str | None, by: str) -> bool:
        """``POST /v1/runs/{run_id}/cancel``, ``/resolve`` or ``/resume``."""
        body: dict[str, JSON] = {"signal_id": signal_id}
        if action == CANCEL:
            path, body["reason"] = "cancel", payload["reason"]
        elif action == RESOLVE:
            path = "resolve"
            body.update(resolution=payload["resolution"], result=payload["result"])
        elif action == RESUME:
            path, body["step"] = "resume", payload["step"]
        else:
            raise ConfigurationError(f"no endpoint sends {action!r}")
        return bool(self._json("POST", f"{_run(run_id)}/{path}", json=body,
                               run_id=run_id)["delivered"])

    def deliver(self, tenant_id: str, decision: JSON) -> bool:
        """``POST /v1/approvals/{run_id}/decision``: the server checks it again."""
        assert isinstance(decision, dict)
        run_id = str(decision["run_id"])
        return bool(self._json("POST", f"/v1/approvals/{quote(run_id, safe='')}/decision",
                               json=decision, run_id=run_id)["delivered"])

    def fork(self, tenant_id: str, run_id: str, *, at_seq: int, step: str | None,
             state_patch: JSON, by: str, reason: str) -> Fork:
        """``POST /v1/runs/{run_id}/fork`` (the server names the key as who forked)."""
        body = {"at_seq": at_seq, "step": step, "state_patch": state_patch, "reason": reason}
        return _wire.fork(self._json("POST", f"{_run(run_id)}/fork", json=body,
                                     run_id=run_id))

    def record_consent(self, tenant_id: str, subject: str, purpose: str, state: str,
                       by: str, reference: str | None) -> ConsentRecord:
        """``POST /v1/consents`` (the server names the key as who recorded it)."""
        body = {"subject": subject, "purpose": purpose, "state": state,
                "reference": reference}
        return _wire.consent(tenant_id, self._json("POST", "/v1/consents", json=body))

    def bulk(self, client: _Acting, plan: _Plan, filter: RunFilter, *, dry_run: bool,
             page_size: int, on_item: Callable[[BulkItem], None] | None) -> BulkResult:
        """``POST /v1/runs/bulk/{action}``: the server selects and acts. With a signer, a
        dry run names each run's request first; each is signed here (the key never
        leaves) and the decisions are sent together."""
        path, body = _bulk_body(plan)
        params = _filter_params(filter)
        signer = plan.signer
        found = self._bulk_call(path, params, {**body, "dry_run": dry_run or bool(signer)})
        if signer is not None and not dry_run:
            decisions = []
            for item in found.items:
                request = self.pending_request(plan.tenant_id, item.run_id) \
                    if item.outcome == "eligible" else None
                made = None if request is None else signer(
                    plan.tenant_id, request, _DECISION[plan.action], plan_answer(plan))
                if made is not None:
                    decisions.append(made)
            found = self._bulk_call(path, params,
                                    {**body, "dry_run": False, "decisions": decisions})
        result = BulkResult(plan.action, dry_run, filter, found.items)
        for item in result.items:
            if on_item is not None:
                on_item(item)
        return result

    def _bulk_call(self, path: str, params: list[tuple[str, str]],
                   body: dict[str, Any]) -> BulkResult:
        d = self._json("POST", f"/v1/runs/bulk/{path}", params=params, json=body)
        items = [BulkItem(i["run_id"], i["outcome"], i["reason"], i["request_id"])
                 for i in d["runs"]]
        return BulkResult(d["action"], d["dry_run"], RunFilter(), items)

    # -- reads --------------------------------------------------------------------------
    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row from ``GET /v1/runs?id_prefix=...``: a row, not the run's data,
        so the access log records no read (``GET /v1/runs/{run_id}`` would). Runs whose
        ids merely start with ``run_id`` are paged past."""
        cursor = None
        while True:
            page = self.list_runs(tenant_id, limit=100, cursor=cursor, id_prefix=run_id)
            found = next((r for r in page.runs if r.run_id == run_id), None)
            if found is not None or page.next_cursor is None:
                return found
            cursor = page.next_cursor

    def list_runs(self, tenant_id: str, *, limit: int, cursor: str | None,
                  id_prefix: str | None = None, **filters: Any) -> RunPage:
        """``GET /v1/runs``; a page longer than the API's is read in several."""
        query = _filter_params(RunFilter(**filters))
        if id_prefix is not None:
            query.append(("id_prefix", id_prefix))
        runs: list[RunRecord] = []
        while True:
            params = [*query, ("limit", str(min(limit - len(runs), API_PAGE)))]
            if cursor is not None:
                params.append(("cursor", cursor))
            d = self._json("GET", "/v1/runs", params=params)
            runs += [_wire.run_record(r) for r in d["runs"]]
            cursor = d["next_cursor"]
            if cursor is None or len(runs) >= limit:
                return RunPage(runs, cursor)

    def events(self, tenant_id: str, run_id: str, after: int,
               limit: int | None) -> list[RunEvent]:
        """``GET /v1/runs/{run_id}/events``."""
        params: dict[str, Any] = {"after": after, **self._reveal}
        if limit is not None:
            params["limit"] = max(limit, 0)
        return [_wire.event(e) for e in self._json("GET", f"{_run(run_id)}/events",
                                                   params=params, run_id=run_id)]

    def history(self, tenant_id: str, run_id: str) -> list[Recorded]:
        """The run's events; :class:`KeyUnavailable` when one is sealed to the server."""
        found = []
        for e in self.events(tenant_id, run_id, 0, None):
            if isinstance(e.event, ev.Encrypted):
                raise KeyUnavailable(
                    f"run {run_id}: the event at seq {e.seq} ({e.event.event_type}) is "
                    f"encrypted and {self.where} has no key that opens it")
            found.append(Recorded(e.seq, e.at, e.event))
        return found

    def state(self, tenant_id: str, run_id: str) -> RunState:
        """The run's events folded here, from its first."""
        return fold(self.history(tenant_id, run_id),
                    start=RunState(tenant_id=tenant_id, run_id=run_id))

    def states_at(self, tenant_id: str, run_id: str, seq: int
                  ) -> tuple[RunState, Recorded, RunState]:
        """The run's events folded here up to ``seq``."""
        records = [r for r in self.history(tenant_id, run_id) if r.seq <= seq]
        return states_around(RunState(tenant_id=tenant_id, run_id=run_id), records, seq)

    def verify(self, tenant_id: str, run_id: str) -> Verification:
        """``GET /v1/audit/verify?run_id=...`` (no such run: not ok, as on a database)."""
        try:
            d = self._json("GET", "/v1/audit/verify", params={"run_id": run_id},
                           run_id=run_id)
        except RunNotFound:
            return Verification(tenant_id, run_id, False, 0, None, "no such run")
        first = d["findings"][0] if d["findings"] else {}
        return Verification(tenant_id, run_id, d["ok"], d["events"], first.get("seq"),
                            first.get("reason", ""))

    def pending_requests(self, tenant_id: str, limit: int) -> list[PendingRequest]:
        """``GET /v1/approvals``."""
        return [_wire.pending(p) for p in self._json(
            "GET", "/v1/approvals", params={"limit": limit, **self._reveal})]

    def pending_request(self, tenant_id: str, run_id: str) -> PendingRequest | None:
        """``GET /v1/approvals/{run_id}``; on a 404, None when the run exists."""
        try:
            found = self._json("GET", f"/v1/approvals/{quote(run_id, safe='')}",
                               params=self._reveal, run_id=run_id)
        except RunNotFound:
            if self.get_run(tenant_id, run_id) is None:
                raise
            return None
        return _wire.pending(found)

    def activity(self, tenant_id: str, *, since: float, days: int,
                 hourly: bool) -> Activity:
        """``GET /v1/activity/days``."""
        return _activity().validate_python(self._json(
            "GET", "/v1/activity/days",
            params={"since": since, "days": days, "hourly": str(hourly).lower()}))

    def run_labels(self, tenant_id: str, run_ids: Sequence[str],
                   reveal: bool) -> dict[str, dict[str, LabelValue]]:
        """``GET /v1/labels``."""
        if not run_ids:
            return {}
        params = [("run_id", r) for r in run_ids] + ([("reveal", "true")] if reveal else [])
        found: dict[str, dict[str, LabelValue]] = self._json("GET", "/v1/labels",
                                                              params=params)
        return found

    def consents(self, tenant_id: str, subject: str) -> dict[str, ConsentRecord]:
        """``GET /v1/consents``: where consent stands, by purpose."""
        d = self._json("GET", "/v1/consents", params={"subject": subject})
        return {e["purpose"]: _wire.consent(tenant_id, e) for e in d["current"]}

    def consent_history(self, tenant_id: str, subject: str,
                        purpose: str | None) -> list[ConsentRecord]:
        """``GET /v1/consents``: the history."""
        params = {"subject": subject, **({"purpose": purpose} if purpose else {})}
        d = self._json("GET", "/v1/consents", params=params)
        return [_wire.consent(tenant_id, e) for e in d["history"]]

    def runs_of_subject(self, tenant_id: str, subject: str,
                        limit: int | None) -> list[RunRecord]:
        """``GET /v1/subjects/runs``."""
        params: dict[str, Any] = {"subject": subject}
        if limit is not None:
            params["limit"] = limit
        return [_wire.run_record(r) for r in self._json("GET", "/v1/subjects/runs",
                                                        params=params)]

    def approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """``GET /v1/approvers/{approver_id}``; None on a 404."""
        r = self._http.request("GET", f"/v1/approvers/{quote(approver_id, safe='')}")
        if r.status_code == 404:
            return None
        if not r.is_success:
            raise _wire.error_of(r, self.where)
        return _wire.approver(tenant_id, r.json())

    # -- live streams -------------------------------------------------------------------
    def read_stream(self, tenant_id: str, run_id: str, after: int,
                    limit: int) -> list[StreamDelta]:
        """``GET /v1/runs/{run_id}/stream/deltas``; more than a page is read in several."""
        found: list[StreamDelta] = []
        while True:
            page, _ = self.stream_page(tenant_id, run_id, after,
                                       min(max(limit - len(found), 0), STREAM_PAGE))
            found += page
            if len(page) < STREAM_PAGE or len(found) >= limit:
                return found
            after = page[-1].offset

    def stream_page(self, tenant_id: str, run_id: str, after: int,
                    limit: int) -> tuple[list[StreamDelta], bool]:
        """``GET /v1/runs/{run_id}/stream/deltas``."""
        d = self._json("GET", f"{_run(run_id)}/stream/deltas", run_id=run_id,
                       params={"after": after, "limit": min(limit, STREAM_PAGE),
                               **self._reveal})
        return [_wire.stream_delta(x) for x in d["deltas"]], bool(d["ended"])

    async def stream(self, tenant_id: str, run_id: str, after: int, follow: bool,
                     limit: int) -> AsyncIterator[StreamDelta]:
        """``GET /v1/runs/{run_id}/stream`` as Server-Sent Events (without ``follow``:
        pages of ``/stream/deltas``). A connection that drops is reopened with
        ``Last-Event-ID``: the last offset given, so no delta comes twice."""
        import httpx
        await asyncio.to_thread(self.tenant, tenant_id)
        timeout = httpx.Timeout(self._timeout, read=max(self._timeout, STREAM_READ_S))
        async with httpx.AsyncClient(base_url=self.where, timeout=timeout,
                                     headers=self._headers) as http:
            if not follow:
                while True:
                    r = await self._async_call(http, f"{_run(run_id)}/stream/deltas", run_id,
                                               {"after": after, "limit": limit})
                    page = [_wire.stream_delta(x) for x in r.json()["deltas"]]
                    for d in page:
                        after = d.offset
                        yield d
                    if not page:
                        return
            drops = 0
            while True:
                try:
                    async with http.stream(
                        "GET", f"{_run(run_id)}/stream", params=self._reveal,
                        headers={"Last-Event-ID": str(after), "Accept": "text/event-stream"},
                    ) as r:
                        if not r.is_success:
                            await r.aread()
                            raise _wire.error_of(r, self.where, tenant_id=self._tenant,
                                                 run_id=run_id)
                        async for kind, data in _server_events(r):
                            if kind == "end":
                                return
                            if kind == "unauthorized":
                                raise _wire.refused_key(self.where, json.loads(data)["detail"])
                            got = _wire.stream_delta(json.loads(data)) \
                                if kind == "delta" else None
                            if got is not None and got.offset > after:
                                after, drops = got.offset, 0
                                yield got
                except (httpx.ReadError, httpx.ReadTimeout, httpx.RemoteProtocolError):
                    pass
                except self._unreachable as exc:
                    raise ServiceError(self._unreachable_words(exc)) from None
                # The connection ended before ``end``: open it again after ``after``.
                drops += 1
                if drops > DROPS:
                    raise ServiceError(
                        f"{self.where} dropped the live stream of run {run_id} {DROPS} "
                        f"times in a row with nothing new after offset {after}")

    async def _async_call(self, http: httpx.AsyncClient, path: str, run_id: str,
                          params: dict[str, Any]) -> httpx.Response:
        try:
            r = await http.get(path, params={**params, **self._reveal})
        except self._unreachable as exc:
            raise ServiceError(self._unreachable_words(exc)) from None
        if r.is_success:
            return r
        raise _wire.error_of(r, self.where, tenant_id=self._tenant, run_id=run_id)

    def _unreachable_words(self, exc: Exception) -> str:
        return (f"cannot reach underway serve at {self.where} ({type(exc).__name__}: "
                f"{exc}); is it running, and is the URL right?")


async def _server_events(r: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """The ``(event, data)`` of each Server-Sent Event of ``r``; comments skipped."""
    kind, data = "message", list[str]()
    async for line in r.aiter_lines():
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def _run(run_id: str) -> str:
    return f"/v1/runs/{quote(run_id, safe='')}"


def _filter_params(f: RunFilter) -> list[tuple[str, str]]:
    """The query of ``GET /v1/runs`` (and of a bulk operation) that selects ``f``."""
    names = {"status": f.status, "flow": f.flow, "created_since": f.since,
             "created_until": f.until, "updated_since": f.updated_since,
             "updated_until": f.updated_until, "q": f.search}
    params = [(k, str(v)) for k, v in names.items() if v is not None]
    return params + [("label", f"{k}={v}") for k, v in label_filter(f.labels).items()]


def _bulk_body(plan: _Plan) -> tuple[str, dict[str, Any]]:
    """The bulk endpoint that carries ``plan``, and its body (without ``dry_run``)."""
    signed = plan.signer is not None
    if plan.action == "resume":
        return ("settle", {"resolution": "resume", "step": plan.step}) if signed \
            else ("resume", {"step": plan.step})
    if plan.action == "resolve":
        body = {"resolution": plan.resolution, "result": plan.result}
        return ("settle", body) if signed else ("resolve", body)
    if plan.action == "cancel":
        return "cancel", {"reason": plan.reason}
    if plan.action == "answer":
        return "answer", {"question": plan.question, "answer": plan.answer}
    return plan.action, {}

