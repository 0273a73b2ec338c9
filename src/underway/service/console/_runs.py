"""``/runs``: the tenant's runs, newest first, filtered by status, flow and labels and
searched by id or flow, with the counts by status above and a column per label; a page of
50 with a cursor to the next."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ...errors import ConfigurationError
from ...labels import MAX_LABELS
from ...store._offload import run_io
from ...store.base import Store
from .._inputs import CheckedRoute
from ._base import Console, Signed, render
from ._labels import filter_of, label_columns

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

STATUSES = ("ready", "waiting", "escalated", "dead", "completed", "failed", "cancelled")
"""Every status a run can have, in the order the console shows them."""
PAGE = 50


@router.get("/runs")
async def runs_page(
    request: Request, state: Console, session: Signed,
    status: Annotated[str | None, Query(max_length=20)] = None,
    flow: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    label: Annotated[list[str] | None, Query(max_length=MAX_LABELS)] = None,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> HTMLResponse:
    """The runs table, with a column per label (a sensitive one reads ``[redacted]``)."""
    tenant = session.principal.tenant_id
    status = status if status in STATUSES else None
    error, labels, shown = "", {}, ", ".join(label or ())
    try:
        wanted = filter_of(label or ())
        page = await run_io(state.store, lambda: state.client.list_runs(
            tenant_id=tenant, status=status, flow=flow or None, search=q or None,
            limit=PAGE, cursor=cursor or None, labels=wanted))
        labels = await run_io(state.store, lambda: state.client.run_labels(
            [r.run_id for r in page.runs], tenant_id=tenant))
    except ConfigurationError as exc:
        error, page = str(exc), None
    counts = await run_io(state.store, _counts, state.store, tenant)
    names, cells = label_columns(labels)
    return render(request, "runs.html", {
        "nav": "runs", "runs": page.runs if page else [],
        "next_cursor": page.next_cursor if page else None, "error": error,
        "status": status, "flow": flow or "", "q": q or "", "counts": counts,
        "statuses": STATUSES, "total": sum(counts.values()), "label": shown,
        "label_names": names, "cells": cells,
    }, session=session)


def _counts(store: Store, tenant: str) -> dict[str, int]:
    found = {s: 0 for s in STATUSES}
    for t, s, n in store.run_counts():
        if t == tenant:
            found[s] = found.get(s, 0) + n
    return found
