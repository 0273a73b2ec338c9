"""``/charts``: the tenant's metrics over the last 7, 30 or 90 days (UTC): runs created
per day by status, model cost and tokens per day, how long approvals waited for a
decision, escalations by cause, dead-letterings per day and the runs dead now, as charts
drawn on the server (:mod:`underway.ops.charts`); ``/charts/data`` is the same figures as JSON.
Everything is counted from the runs table and the journal (:meth:`Client.activity
<underway.client.Client.activity>`), in the session's tenant. (``/metrics`` is the app's
Prometheus endpoint.)"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from ...client import Activity, Client
from ...client._activity import DAY
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
from .._inputs import CheckedRoute
from ._base import Console, Signed, render
from ._runs import STATUSES

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

WINDOWS = (7, 30, 90)
"""The windows the page offers, in days."""
DEFAULT_WINDOW = 30
DEAD_LISTED = 50
"""The most dead runs the page lists."""
WAIT_BINS: tuple[tuple[float, str], ...] = (
    (60, "< 1 min"), (300, "1-5 min"), (900, "5-15 min"), (3_600, "15-60 min"),
    (14_400, "1-4 h"), (86_400, "4-24 h"), (math.inf, "≥ 1 day"),
)
"""The approval waits' histogram: (upper bound in seconds, label) of each bin."""


@router.get("/charts")
async def charts_page(
    request: Request, state: Console, session: Signed,
    days: Annotated[str | None, Query()] = None,
) -> Response:
    """The metrics page."""
    window = _window(days)
    if window is None:
        return render(request, "error.html", {"title": "Bad window", "reason": _BAD},
                      session=session, status_code=400)
    figures = await run_io(state.store, figures_of, state.client,
                           session.principal.tenant_id, window)
    return render(request, "charts.html", {
        "nav": "metrics", "f": figures, "windows": WINDOWS, "charts": _charts(figures),
        "totals": _totals(figures), "table": _table(figures),
    }, session=session)


@router.get("/charts/data")
async def charts_data(
    state: Console, session: Signed, days: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    """The metrics page's figures as JSON."""
    window = _window(days)
    if window is None:
        return JSONResponse({"error": "bad-window", "detail": _BAD}, status_code=400,
                            headers={"Cache-Control": "no-store"})
    figures = await run_io(state.store, figures_of, state.client,
                           session.principal.tenant_id, window)
    return JSONResponse(figures, headers={"Cache-Control": "no-store"})


_BAD = f"days must be one of {', '.join(map(str, WINDOWS))}"


def _window(days: str | None) -> int | None:
    """The window asked for (the default when none is), or None when it is not offered."""
    if days is None or days == "":
        return DEFAULT_WINDOW
    return int(days) if days.isdigit() and int(days) in WINDOWS else None


def figures_of(client: Client, tenant_id: str, days: int) -> dict[str, Any]:
    """The figures of the last ``days`` days (UTC, today included) of ``tenant_id``, as
    JSON: a list per figure with one value per day."""
    now = client.clock.now()
    since = (math.floor(now / DAY) - days + 1) * DAY
    act = client.activity(since=since, days=days, tenant_id=tenant_id)
    dead = client.list_runs(tenant_id=tenant_id, status="dead", limit=DEAD_LISTED)
    return {
        "tenant": tenant_id, "days": days, "since": since, "until": act.until,
        "dates": [_date(d.start) for d in act.days],
        "runs": {s: [d.runs.get(s, 0) for d in act.days] for s in _statuses(act)},
        "model_calls": [d.model_calls for d in act.days],
        "tokens_in": [d.tokens_in for d in act.days],
        "tokens_out": [d.tokens_out for d in act.days],
        "cost_usd": [d.cost_usd for d in act.days],
        "approvals": _approvals(act),
        "escalations": {
            "per_day": [sum(d.escalations.values()) for d in act.days],
            "by_cause": _by_cause(act),
        },
        "dead_lettered": [d.dead_lettered for d in act.days],
        "dead_now": {
            "runs": [{"run_id": r.run_id, "flow": r.flow, "step": r.step,
                      "since": r.updated_at} for r in dead.runs],
            "more": dead.next_cursor is not None,
        },
        "read": {"runs": act.runs_read, "events": act.events_read,
                 "unreadable": act.unreadable},
    }


def _statuses(act: Activity) -> list[str]:
    """Every status in the console's order, then any other a run has (none, today)."""
    seen = {s for d in act.days for s in d.runs}
    return [*STATUSES, *sorted(seen - set(STATUSES))]


def _approvals(act: Activity) -> dict[str, Any]:
    waits = sorted(w for d in act.days for w in d.approval_waits)
    histogram = [0] * len(WAIT_BINS)
    for w in waits:
        histogram[next(i for i, (bound, _) in enumerate(WAIT_BINS) if w < bound)] += 1
    return {
        "decided": [len(d.approval_waits) for d in act.days],
        "expired": [d.approvals_expired for d in act.days],
        "wait_p50_s": [_percentile(d.approval_waits, 0.5) for d in act.days],
        "wait_p90_s": [_percentile(d.approval_waits, 0.9) for d in act.days],
        "window_p50_s": _percentile(waits, 0.5),
        "window_p90_s": _percentile(waits, 0.9),
        "histogram": [{"label": label, "count": n}
                      for (_, label), n in zip(WAIT_BINS, histogram, strict=True)],
    }


def _percentile(ordered: list[float], p: float) -> float | None:
    """The nearest-rank percentile of sorted values (None when there are none)."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def _by_cause(act: Activity) -> dict[str, int]:
    found: dict[str, int] = {}
    for d in act.days:
        for cause, n in d.escalations.items():
            found[cause] = found.get(cause, 0) + n
    return dict(sorted(found.items()))


def _date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _charts(f: dict[str, Any]) -> dict[str, Chart]:
    dates: list[str] = f["dates"]
    a = f["approvals"]
    return {
        "runs": columns(dates, [Series(f"st-{s}", s, v) for s, v in f["runs"].items()],
                        stacked=True, ceiling=count_ceiling,
                        label="Runs created per day, by status"),
        "cost": columns(dates, [Series("cost", "cost", f["cost_usd"])], fmt=usd,
                        label="Model cost per day, US dollars"),
        "tokens": columns(dates, [Series("tokens-in", "input tokens", f["tokens_in"]),
                                  Series("tokens-out", "output tokens", f["tokens_out"])],
                          stacked=True, label="Model tokens per day"),
        "waits": columns(dates, [
            Series("p50", "median wait", [w or 0.0 for w in a["wait_p50_s"]]),
            Series("p90", "90th percentile", [w or 0.0 for w in a["wait_p90_s"]]),
        ], fmt=duration, ceiling=duration_ceiling,
            label="Approval waiting time per day of decision"),
        "histogram": columns([b["label"] for b in a["histogram"]],
                             [Series("decided", "decisions",
                                     [b["count"] for b in a["histogram"]])],
                             every=1, ceiling=count_ceiling,
                             label="Approvals by waiting time"),
        "causes": rows(list(f["escalations"]["by_cause"].items()), cls="escalation",
                       label="Escalations by cause"),
        "dead": columns(dates, [Series("dead", "dead-lettered", f["dead_lettered"])],
                        ceiling=count_ceiling, label="Runs dead-lettered per day"),
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
