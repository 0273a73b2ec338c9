"""``/runs``: the tenant's runs, newest first, filtered by status and flow and searched by
id or flow, with the counts by status above; a page of 50 with a cursor to the next."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from ...errors import ConfigurationError
from ...store._offload import run_io
from ...store.base import Store
from .._inputs import CheckedRoute
from ._base import Console, Signed, render

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
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> HTMLResponse:
    """The runs table."""
    tenant = session.principal.tenant_id
    status = status if status in STATUSES else None
    error = ""
    try:
        page = await run_io(state.store, lambda: state.client.list_runs(
            tenant_id=tenant, status=status, flow=flow or None, search=q or None,
            limit=PAGE, cursor=cursor or None))
    except ConfigurationError as exc:
        error, page = str(exc), None
    counts = await run_io(state.store, _counts, state.store, tenant)
    rows = page.runs if page else []
    waiting = await run_io(state.store, lambda: {r.run_id: state.client.waiting_on(r)
                                                 for r in rows})
    return render(request, "runs.html", {
        "waiting": waiting,
        "nav": "runs", "runs": page.runs if page else [],
        "next_cursor": page.next_cursor if page else None, "error": error,
        "status": status, "flow": flow or "", "q": q or "", "counts": counts,
        "statuses": STATUSES, "total": sum(counts.values()),
    }, session=session)


def _counts(store: Store, tenant: str) -> dict[str, int]:
    found = {s: 0 for s in STATUSES}
    for t, s, n in store.run_counts():
        if t == tenant:
            found[s] = found.get(s, 0) + n
    return found
