"""``/charts``: the tenant's metrics over the last 1, 7, 30 or 90 days (UTC), by day or
(``by=hour``, up to 7 days) by hour: runs created by status, model cost and tokens, how
long approvals waited for a decision, approvals and takeover rate per approver role,
escalations by cause, dead-letterings and the runs dead now, as charts
drawn on the server (:mod:`underway.ops.charts`); ``/charts/data`` is the same figures as JSON.
Everything is counted from the runs table and the journal (:meth:`Client.activity
<underway.client.Client.activity>`), in the session's tenant. (``/metrics`` is the app's
Prometheus endpoint.)"""

from __future__ import annotations

import math
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from ...ops.charts import (
    Chart,
    Series,
    columns,
    count,
    count_ceiling,
    duration,
    duration_ceiling,
    rows,
    usd,
)
from ...store._offload import run_io
from .._activity import MAX_HOURLY_DAYS, figures_of
from .._inputs import CheckedRoute
from ._base import Console, Signed, render

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

WINDOWS = (1, 7, 30, 90)
"""The windows the page offers, in days."""
DEFAULT_WINDOW = 30


@router.get("/charts")
async def charts_page(
    request: Request, state: Console, session: Signed,
    days: Annotated[str | None, Query()] = None, by: Annotated[str | None, Query()] = None,
) -> Response:
    """The metrics page, by day or (for a window of up to a week) by hour."""
    window, hourly = _window(days), _hourly(by)
    if window is None or hourly is None or (hourly and window > MAX_HOURLY_DAYS):
        return render(request, "error.html", {"title": "Bad window", "reason": _BAD},
                      session=session, status_code=400)
    figures = await run_io(state.store, partial(figures_of, hourly=hourly), state.client,
                           session.principal.tenant_id, window)
    return render(request, "charts.html", {
        "nav": "metrics", "f": figures, "windows": WINDOWS, "charts": _charts(figures),
        "totals": _totals(figures), "table": _table(figures), "roles": _roles(figures),
        "unit": "hour" if hourly else "day",
    }, session=session)


@router.get("/charts/data")
async def charts_data(
    state: Console, session: Signed, days: Annotated[str | None, Query()] = None,
    by: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    """The metrics page's figures as JSON (those of ``GET /v1/activity``)."""
    window, hourly = _window(days), _hourly(by)
    if window is None or hourly is None or (hourly and window > MAX_HOURLY_DAYS):
        return JSONResponse({"error": "bad-window", "detail": _BAD}, status_code=400,
                            headers={"Cache-Control": "no-store"})
    figures = await run_io(state.store, partial(figures_of, hourly=hourly), state.client,
                           session.principal.tenant_id, window)
    return JSONResponse(figures, headers={"Cache-Control": "no-store"})


_BAD = (f"days must be one of {', '.join(map(str, WINDOWS))}, and by 'day' or 'hour' "
        f"(by hour, at most {MAX_HOURLY_DAYS} days)")


def _window(days: str | None) -> int | None:
    """The window asked for (the default when none is), or None when it is not offered."""
    if days is None or days == "":
        return DEFAULT_WINDOW
    return int(days) if days.isdigit() and int(days) in WINDOWS else None


def _hourly(by: str | None) -> bool | None:
    """True by hour, False by day (the default), None for anything else."""
    return {None: False, "": False, "day": False, "hour": True}.get(by)


def _roles(f: dict[str, Any]) -> list[list[str]]:
    """A row per approver role: decided, approved, rejected, expired, takeover rate,
    median and 90th percentile wait."""
    found = []
    for r in f["approvals"]["by_role"]:
        rate = r["takeover_rate"]
        found.append([
            r["role"], count(r["decided"]), count(r["approved"]), count(r["rejected"]),
            count(r["expired"]), f"{rate:.0%}" if rate is not None else "—",
            duration(r["wait_p50_s"]) if r["wait_p50_s"] is not None else "—",
            duration(r["wait_p90_s"]) if r["wait_p90_s"] is not None else "—",
        ])
    return found


def _charts(f: dict[str, Any]) -> dict[str, Chart]:
    dates: list[str] = f["dates"]
    a, unit = f["approvals"], f["by"]
    return {
        "runs": columns(dates, [Series(f"st-{s}", s, v) for s, v in f["runs"].items()],
                        stacked=True, ceiling=count_ceiling,
                        label=f"Runs created per {unit}, by status"),
        "cost": columns(dates, [Series("cost", "cost", f["cost_usd"])], fmt=usd,
                        label=f"Model cost per {unit}, US dollars"),
        "tokens": columns(dates, [Series("tokens-in", "input tokens", f["tokens_in"]),
                                  Series("tokens-out", "output tokens", f["tokens_out"])],
                          stacked=True, label=f"Model tokens per {unit}"),
        "waits": columns(dates, [
            Series("p50", "median wait", [w or 0.0 for w in a["wait_p50_s"]]),
            Series("p90", "90th percentile", [w or 0.0 for w in a["wait_p90_s"]]),
        ], fmt=duration, ceiling=duration_ceiling,
            label=f"Approval waiting time per {unit} of decision"),
        "histogram": columns([b["label"] for b in a["histogram"]],
                             [Series("decided", "decisions",
                                     [b["count"] for b in a["histogram"]])],
                             every=1, ceiling=count_ceiling,
                             label="Approvals by waiting time"),
        "causes": rows(list(f["escalations"]["by_cause"].items()), cls="escalation",
                       label="Escalations by cause"),
        "dead": columns(dates, [Series("dead", "dead-lettered", f["dead_lettered"])],
                        ceiling=count_ceiling, label=f"Runs dead-lettered per {unit}"),
    }


def _table(f: dict[str, Any]) -> list[list[str]]:
    """A row of numbers per day, newest first."""
    a = f["approvals"]
    found = []
    for i, day in enumerate(f["dates"]):
        p50 = a["wait_p50_s"][i]
        found.append([
            day, count(sum(v[i] for v in f["runs"].values())), count(f["model_calls"][i]),
            count(f["tokens_in"][i]), count(f["tokens_out"][i]), usd(f["cost_usd"][i]),
            count(a["decided"][i]), duration(p50) if p50 is not None else "—",
            count(a["expired"][i]), count(f["escalations"]["per_day"][i]),
            count(f["dead_lettered"][i]),
        ])
    return found[::-1]


def _totals(f: dict[str, Any]) -> dict[str, str]:
    a = f["approvals"]
    p50 = a["window_p50_s"]
    return {
        "runs created": count(sum(sum(v) for v in f["runs"].values())),
        "model cost": usd(math.fsum(f["cost_usd"])),
        "tokens": count(sum(f["tokens_in"]) + sum(f["tokens_out"])),
        "approvals decided": count(sum(a["decided"])),
        "median approval wait": duration(p50) if p50 is not None else "—",
        "escalations": count(sum(f["escalations"]["per_day"])),
        "dead-lettered": count(sum(f["dead_lettered"])),
    }
