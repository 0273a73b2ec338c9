"""``/runs``: the tenant's runs, newest first, filtered by status, flow and labels and
searched by id or flow, with the counts by status above (each up to :data:`COUNT_CAP`) and
a column per label; a page of 50 with a cursor to the next. A key that may steer runs gets
a form to act on every run of the filter (:mod:`._bulk`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from ...client import RunFilter
from ...errors import ConfigurationError
from ...labels import MAX_LABELS
from ...store._offload import run_io
from .._inputs import CheckedRoute
from ._base import Console, Signed, render
from ._labels import filter_of, label_columns

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

STATUSES = ("ready", "waiting", "escalated", "dead", "completed", "failed", "cancelled")
"""Every status a run can have, in the order the console shows them."""
PAGE = 50
COUNT_CAP = 1_000
"""The most runs of a status counted above the list; more show as ``1000+``. Each
count reads at most this many index entries, so the page costs the same at a million runs
as at ten thousand."""


def page_filter(
    status: Annotated[str | None, Query(max_length=20)] = None,
    flow: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    label: Annotated[list[str] | None, Query(max_length=MAX_LABELS)] = None,
) -> RunFilter:
    """The runs filter of the page's query (``?status=&flow=&q=&label=``): what the runs
    list shows and a bulk action acts on. An unknown status is no filter, as the list's
    links never make one. A bad label raises :class:`~underway.errors.InvalidInput`
    naming it.

    Args:
        status: Only runs with this status.
        flow: Only runs of this flow.
        q: Only runs whose id or flow contains it.
        label: Only runs with every one of these labels (``name=value``).
    """
    return RunFilter(status=status if status in STATUSES else None, flow=flow or None,
                     search=q or None, labels=filter_of(label or ()) or None)


PageFilter = Annotated[RunFilter, Depends(page_filter)]
"""The runs filter a console request's query names."""


def query_of(filtered: RunFilter) -> str:
    """The query string that names ``filtered`` (as :func:`page_filter` reads it).

    Args:
        filtered: The filter.
    """
    fields: list[tuple[str, str]] = [
        (k, v) for k, v in (("status", filtered.status), ("flow", filtered.flow),
                            ("q", filtered.search)) if v]
    fields += [("label", f"{k}={v}") for k, v in (filtered.labels or {}).items()]
    return urlencode(fields)


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
    error, labels, shown = "", {}, ", ".join(label or ())
    filtered = RunFilter(status=status if status in STATUSES else None, flow=flow or None,
                         search=q or None)
    try:
        filtered = replace(filtered, labels=filter_of(label or ()) or None)
        page = await run_io(state.store, lambda: state.client.list_runs(
            tenant_id=tenant, limit=PAGE, cursor=cursor or None, **filtered.keywords()))
        labels = await run_io(state.store, lambda: state.client.run_labels(
            [r.run_id for r in page.runs], tenant_id=tenant))
    except ConfigurationError as exc:
        error, page = str(exc), None
    counts = await run_io(state.store, lambda: state.store.status_counts(
        tenant, STATUSES, cap=COUNT_CAP))
    capped = {s for s, n in counts.items() if n >= COUNT_CAP}
    rows = page.runs if page else []
    waiting = await run_io(state.store, lambda: {r.run_id: state.client.waiting_on(r)
                                                 for r in rows})
    names, cells = label_columns(labels)
    return render(request, "runs.html", {
        "waiting": waiting,
        "nav": "runs", "runs": page.runs if page else [],
        "next_cursor": page.next_cursor if page else None, "error": error,
        "status": filtered.status, "flow": filtered.flow or "", "q": filtered.search or "",
        "counts": counts, "capped": capped, "statuses": STATUSES,
        "total": sum(counts.values()),
        "may_steer": session.may("steer"), "may_decide": session.may("decide"),
        "query": query_of(filtered), "label": shown,
        "label_names": names, "cells": cells,
    }, session=session)
