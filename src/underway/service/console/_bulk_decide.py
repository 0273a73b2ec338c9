"""``/approvals/bulk``: answer, approve or reject many runs at once, each decision signed in
the browser.

``GET /approvals/bulk?action=answer&question=…`` (or ``action=approve``), with the runs
list's filter in its query, is the dry run: :meth:`~underway.client.Client.bulk` lists the
runs the action fits, each with the request it waits on. The page shows the count, what
each run asks, and the exact fields each run's decision carries. The browser signs one
decision per ticked run with the approver's key (``static/bulk_decide.js``, the signing
code of the single decision) and posts them all, as JSON with the session's CSRF token, to
``POST /approvals/bulk``. That takes the API's path (``POST /v1/runs/bulk/{action}``):
each decision goes to the run it names, which verifies it again. A run without a valid
decision fails or is skipped alone, with the reason; the others go on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError

from ...client import BulkItem, RunFilter, redact_request
from ...errors import ConfigurationError
from ...store._offload import run_io
from ...store.access import DEFAULT_PURPOSE
from .._auth import ServiceState
from .._bulk import BulkAnswer, BulkDecide, run_bulk
from .._inputs import CheckedRoute
from .._problems import ApiProblem
from ._approvals import signing_fields, suggested_id
from ._base import Console, Purpose, ReadAs, Signed, check_form, read_as, render, require
from ._runs import PageFilter, query_of
from ._session import Session

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

KINDS = {"answer": "question", "approve": "approval", "reject": "approval"}
"""The console's signed bulk actions and the request each settles."""
MAX_RUNS = 1000
"""The most runs one page signs for: narrow the filter for more."""
MAX_BODY = 4 * 1024 * 1024
"""The largest post of signed decisions."""

Text = Annotated[str, Query(max_length=2000)]


@router.get("/approvals/bulk")
async def dry_run(request: Request, state: Console, session: Signed, filtered: PageFilter,
                  action: Annotated[str, Query(max_length=20)] = "answer",
                  question: Text = "", tool: Annotated[str, Query(max_length=200)] = "",
                  purpose: Purpose = DEFAULT_PURPOSE) -> HTMLResponse:
    """The dry run: the runs of the filter that ``action`` fits (those that ask
    ``question``; with ``tool``, those held on that tool), what each asks, and the fields
    each run's decision signs."""
    require(session, "decide")
    if action not in KINDS:
        return _page_error(request, session, f"choose an action: {', '.join(KINDS)}", 422)
    rd = read_as(state, session, purpose, False, deciding=True)
    context: dict[str, Any] = {
        "nav": "approvals", "action": action, "kind": KINDS[action], "question": question,
        "tool": tool, "query": query_of(filtered), "filter": _described(filtered),
        "tenant": session.principal.tenant_id, "suggested_id": suggested_id(session),
        "required_role": None,
    }
    if action == "answer" and not question:
        asked = await run_io(state.store, _questions, state, session, filtered)
        context.update(questions=asked)
        return render(request, "approvals_bulk.html", context, session=session)
    try:
        runs, skipped = await run_io(state.store, _read, state, request, session, rd,
                                     action, filtered, question, tool)
    except ConfigurationError as exc:
        return _page_error(request, session, str(exc), 422)
    total, runs = len(runs), runs[:MAX_RUNS]
    roles = sorted({r["role"] for r in runs if r["role"]})
    context.update(runs=runs, skipped=skipped, total=total, max_runs=MAX_RUNS,
                   required_role=roles[0] if len(roles) == 1 else None, roles=roles,
                   signing=[r["signing"] for r in runs])
    return render(request, "approvals_bulk.html", context, session=session)


@router.post("/approvals/bulk")
async def send(request: Request, state: Console, session: Signed,
               filtered: PageFilter) -> JSONResponse:
    """The signed decisions (JSON: ``action``, ``question``, ``answer``, ``decisions``; the
    CSRF token in ``X-CSRF-Token``), each sent to its run as ``POST
    /v1/runs/bulk/{action}`` sends it. The answer lists each run's outcome."""
    check_form(request, session, None)
    require(session, "decide")
    raw = await request.body()
    if len(raw) > MAX_BODY:
        return _refused(413, "too many decisions in one post: narrow the filter")
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        return _refused(422, f"the body is not JSON: {exc}")
    action = fields.pop("action", None) if isinstance(fields, dict) else None
    if action not in KINDS:
        return _refused(422, f"action: choose one of {', '.join(KINDS)}")
    model = BulkAnswer if action == "answer" else BulkDecide
    try:
        body: BulkAnswer | BulkDecide = model.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                             for e in exc.errors())
        return _refused(422, f"not a bulk {action}: {problems}")
    if not body.decisions:
        return _refused(422, "no signed decision: sign one per run first")
    options: dict[str, object] = {}
    if isinstance(body, BulkAnswer):
        options = {"question": body.question, "answer": body.answer}
    body = body.model_copy(update={"dry_run": False})
    try:
        report = await run_io(state.store, lambda: run_bulk(
            state, session.principal, action, filtered, body, **options))
    except ApiProblem as exc:
        return _refused(exc.problem.status, exc.problem.detail + "".join(
            f" {e.field}: {e.message}" for e in exc.problem.errors))
    except ConfigurationError as exc:
        return _refused(422, str(exc))
    return JSONResponse(report.model_dump(mode="json"), headers={"Cache-Control": "no-store"})


def _read(state: ServiceState, request: Request, session: Session, rd: ReadAs, action: str,
          filtered: RunFilter, question: str, tool: str
          ) -> tuple[list[dict[str, Any]], list[BulkItem]]:
    """The dry run: the runs to sign for (each with what it asks and its signing fields),
    and the runs skipped, with why."""
    tenant = session.principal.tenant_id
    report = state.client.bulk(
        action, filtered, by=session.principal.actor, tenant_id=tenant,  # type: ignore[arg-type]
        dry_run=True, question=question or None, answer="" if action == "answer" else None,
        signer=lambda *_: None)
    now = state.client.clock.now()
    runs: list[dict[str, Any]] = []
    skipped = [i for i in report.items if i.outcome != "eligible"]
    for item in report.items:
        if item.outcome != "eligible":
            continue
        pending = state.client.pending_request(item.run_id, tenant_id=tenant)
        if pending is None or pending.request_id != item.request_id:
            skipped.append(BulkItem(item.run_id, "skipped", "it moved on since"))
            continue
        if tool and pending.tool != tool:
            skipped.append(BulkItem(item.run_id, "skipped",
                                    f"it waits on another call: {pending.tool}"))
            continue
        hide = state.client.redactor(item.run_id, tenant_id=tenant, reveal=False)
        shown = redact_request(pending, redactor=hide)
        runs.append({"r": shown, "role": pending.required_role,
                     "signing": signing_fields(pending, tenant, now)})
    state.record_reads(request, session.principal, [r["r"].run_id for r in runs],
                       purpose=rd.purpose, revealed=False)
    return runs, skipped


def _questions(state: ServiceState, session: Session, filtered: RunFilter
               ) -> list[tuple[str, int]]:
    """The questions the filter's escalated runs ask (the first :data:`MAX_RUNS` runs),
    with how many ask each, most asked first."""
    tenant = session.principal.tenant_id
    chosen = replace(filtered, status=filtered.status or "escalated")
    counts: dict[str, int] = {}
    cursor: str | None = None
    seen = 0
    while seen < MAX_RUNS:
        page = state.client.list_runs(tenant_id=tenant, limit=100, cursor=cursor,
                                      **chosen.keywords())
        for row in page.runs[:MAX_RUNS - seen]:
            pending = state.client.pending_request(row.run_id, tenant_id=tenant)
            if pending is not None and pending.kind == "question" and pending.question:
                counts[pending.question] = counts.get(pending.question, 0) + 1
        seen += len(page.runs)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _described(filtered: RunFilter) -> str:
    return ", ".join(f"{k} {v}" for k, v in filtered.keywords().items() if v) or "all runs"


def _page_error(request: Request, session: Session, reason: str,
                status_code: int) -> HTMLResponse:
    return render(request, "error.html", {"title": "Not done", "reason": reason},
                  session=session, status_code=status_code)


def _refused(status_code: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code,
                        headers={"Cache-Control": "no-store"})
