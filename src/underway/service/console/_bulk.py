"""``POST /runs/bulk``: resume, cancel or resolve every run of the runs list's filter.

The runs page posts the form to ``/runs/bulk`` with its own query (the filter, read by
:func:`~._runs.page_filter` as the list reads it) and the session's CSRF token. The first post
is a dry run: the page shows how many runs match, how many the action fits, the first
ids and why the others are skipped, with a form to confirm. The confirming post acts,
run by run, and shows what was done to each. It is :meth:`~underway.client.Client.bulk`,
for a key that may steer runs; each run journals the key's name as who acted. Answers and
approvals are signed per run by an approver, in bulk on ``/approvals/bulk``
(:mod:`._bulk_decide`). Where runs
settle only with signed resolutions, resume and resolve are refused (409) and nothing is
sent."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from ...client import BulkResult
from ...errors import ConfigurationError, SignedResolutionRequired
from ...inputs import parse_json
from ...store._offload import run_io
from .._inputs import CheckedRoute
from ._base import Console, Signed, check_form, render, require
from ._runs import PageFilter, query_of

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

ACTIONS = ("resume", "cancel", "resolve")
"""What the console does in bulk: the unsigned actions."""
PREVIEW = 20
"""Run ids a dry run shows."""

Field = Annotated[str, Form(max_length=200)]


@router.post("/runs/bulk")
async def bulk(
    request: Request, state: Console, session: Signed, filtered: PageFilter,
    csrf: Field = "", action: Field = "",
    reason: Annotated[str, Form(max_length=2000)] = "", step: Field = "",
    resolution: Field = "", result: Annotated[str, Form(max_length=100_000)] = "",
    confirm: Field = "",
) -> HTMLResponse:
    """A dry run of ``action`` on the runs of the query's filter; with ``confirm``, the
    action."""
    check_form(request, session, csrf)
    require(session, "steer")
    who = session.principal
    fields = {"action": action, "reason": reason, "step": step, "resolution": resolution,
              "result": result}

    def refuse(reason: str, status_code: int) -> HTMLResponse:
        return render(request, "error.html", {"title": "Not done", "reason": reason},
                      session=session, status_code=status_code)

    if action not in ACTIONS:
        return refuse(f"choose an action: {', '.join(ACTIONS)} (answers and approvals are "
                      "signed per run by an approver: /approvals/bulk signs them in bulk in "
                      "the browser)", 422)
    options: dict[str, Any] = {}
    if action == "cancel":
        options["reason"] = reason
    elif action == "resume":
        options["step"] = step.strip() or None
    else:
        options["resolution"] = resolution
        try:
            options["result"] = parse_json("form.result", result) if result.strip() else None
        except ConfigurationError as exc:
            return refuse(str(exc), 422)
    try:
        report: BulkResult = await run_io(state.store, lambda: state.client.bulk(
            action, filtered, by=who.actor, tenant_id=who.tenant_id,  # type: ignore[arg-type]
            dry_run=confirm != "yes", **options))
    except SignedResolutionRequired as exc:
        return refuse(str(exc), 409)
    except ConfigurationError as exc:
        return refuse(str(exc), 422)
    skipped: dict[str, int] = {}
    for item in report.items:
        if item.outcome == "skipped":
            skipped[item.reason] = skipped.get(item.reason, 0) + 1
    described = ", ".join(f"{k} {v}" for k, v in filtered.keywords().items() if v) or "all"
    return render(request, "runs_bulk.html", {
        "nav": "runs", "report": report, "counts": report.counts, "fields": fields,
        "filter": described, "preview": report.ids("eligible")[:PREVIEW],
        "skipped": sorted(skipped.items()), "items": report.items,
        "query": query_of(filtered),
    }, session=session)
