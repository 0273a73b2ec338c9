"""``GET /v1/activity``: the tenant's figures by day or by hour, counted from the runs table
and the journal (:meth:`Client.activity <underway.client.Client.activity>`). The console's
metrics page (``/charts``) draws the same figures, made here by :func:`figures_of`."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from ..client import Activity, Client
from ..client._activity import DAY, MAX_DAYS
from ..inputs import MAX_TIME
from ..store.access import ALL_RUNS
from ._auth import Caller, State, endpoint
from ._inputs import CheckedRoute
from ._problems import invalid
from ._reading import Purpose

router = APIRouter(prefix="/v1", tags=["reads"], route_class=CheckedRoute)

STATUSES = ("ready", "waiting", "escalated", "dead", "completed", "failed", "cancelled")
"""Every status a run can have, in the order figures list them."""
MAX_HOURLY_DAYS = 7
"""The longest window counted by hour (168 buckets)."""
DEAD_LISTED = 50
"""The most dead runs the figures list."""
WAIT_BINS: tuple[tuple[float, str], ...] = (
    (60, "< 1 min"), (300, "1-5 min"), (900, "5-15 min"), (3_600, "15-60 min"),
    (14_400, "1-4 h"), (86_400, "4-24 h"), (math.inf, "≥ 1 day"),
)
"""The approval waits' histogram: (upper bound in seconds, label) of each bin."""


class Period(StrEnum):
    """What one value of a figure counts: a day, or an hour."""

    DAY = "day"
    HOUR = "hour"


class WaitBin(BaseModel):
    """One bin of the approval waits' histogram: how many waits fell in it."""

    label: str
    count: int


class RoleFigures(BaseModel):
    """An approver role's decisions over the window. ``takeover_rate``: the share of
    decided requests it rejected (null: none decided)."""

    role: str
    approved: int
    rejected: int
    expired: int
    decided: int
    takeover_rate: float | None
    wait_p50_s: float | None
    wait_p90_s: float | None


class ApprovalFigures(BaseModel):
    """Approvals per day or hour (decided, expired, waiting time), over the window, and
    per approver role."""

    decided: list[int]
    expired: list[int]
    wait_p50_s: list[float | None]
    wait_p90_s: list[float | None]
    window_p50_s: float | None
    window_p90_s: float | None
    histogram: list[WaitBin]
    by_role: list[RoleFigures]


class EscalationFigures(BaseModel):
    """Escalations per day or hour, and by cause over the window."""

    per_day: list[int]
    by_cause: dict[str, int]


class DeadRun(BaseModel):
    """A dead run, dead ``since``."""

    run_id: str
    flow: str
    step: str | None
    since: float


class DeadNow(BaseModel):
    """The dead runs now (the newest 50); ``more``: there are others."""

    runs: list[DeadRun]
    more: bool


class ReadFigures(BaseModel):
    """What was read to count: runs, events, and the runs that could not be read."""

    runs: int
    events: int
    unreadable: list[str]


class ActivityFigures(BaseModel):
    """The tenant's figures: a list per figure, one value per date of ``dates``."""

    tenant: str
    days: int
    by: Period
    since: float
    until: float
    dates: list[str]
    runs: dict[str, list[int]]
    """Runs created, by status."""
    model_calls: list[int]
    tokens_in: list[int]
    tokens_out: list[int]
    cost_usd: list[float]
    approvals: ApprovalFigures
    escalations: EscalationFigures
    dead_lettered: list[int]
    dead_now: DeadNow
    read: ReadFigures


@endpoint(router, "GET", "/activity", permission="read", run_data=True,
          response_model=ActivityFigures)
def get_activity(
    state: State, who: Caller, request: Request, purpose: Purpose,
    days: Annotated[int, Query(ge=1, le=90, description="The last N days (UTC), today "
                               "included.")] = 7,
    by: Annotated[Period, Query(description="One figure per day, or per hour (windows of up "
                                "to 7 days).")] = Period.DAY,
) -> dict[str, Any]:
    """Runs created by status, model calls, tokens and cost, approval waits, approvals and
    takeover rate per approver role, escalations and dead-letterings: a list per figure,
    one value per day or hour (read from every run's journal in the window: the access
    log records it as a read of run ``*``)."""
    if by is Period.HOUR and days > MAX_HOURLY_DAYS:
        raise invalid("query.days", f"by hour, days is at most {MAX_HOURLY_DAYS}")
    figures = figures_of(state.client, who.tenant_id, days, hourly=by is Period.HOUR)
    state.record_reads(request, who, [ALL_RUNS], purpose=purpose)
    return figures


@endpoint(router, "GET", "/activity/days", permission="read", run_data=True,
          response_model=Activity)
def get_activity_days(
    state: State, who: Caller, request: Request, purpose: Purpose,
    since: Annotated[float, Query(ge=0, le=MAX_TIME, description="The window's start "
                                  "(epoch seconds).")],
    days: Annotated[int, Query(ge=1, le=MAX_DAYS, description="How many days it "
                               "spans.")],
    hourly: Annotated[bool, Query(description="Count each hour apart.")] = False,
) -> Activity:
    """What the tenant's runs did on each day (or hour) of a window, bucket by bucket, as
    :meth:`Client.activity <underway.client.Client.activity>` counts it (the access log
    records it as a read of run ``*``)."""
    found = state.client.activity(since=since, days=days, hourly=hourly,
                                  tenant_id=who.tenant_id)
    state.record_reads(request, who, [ALL_RUNS], purpose=purpose)
    return found


def figures_of(client: Client, tenant_id: str, days: int, *,
               hourly: bool = False) -> dict[str, Any]:
    """The figures of the last ``days`` days (UTC, today included) of ``tenant_id``, as
    JSON: a list per figure with one value per day, or per hour when ``hourly``.

    Args:
        client: Reads the runs.
        tenant_id: The tenant.
        days: The window's length in days.
        hourly: One value per hour, not per day.
    """
    now = client.clock.now()
    since = (math.floor(now / DAY) - days + 1) * DAY
    act = client.activity(since=since, days=days, hourly=hourly, tenant_id=tenant_id)
    dead = client.list_runs(tenant_id=tenant_id, status="dead", limit=DEAD_LISTED)
    return {
        "tenant": tenant_id, "days": days, "by": "hour" if hourly else "day",
        "since": since, "until": act.until,
        "dates": [_label(d.start, hourly) for d in act.days],
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
        "by_role": _by_role(act),
    }


def _by_role(act: Activity) -> list[dict[str, Any]]:
    """Per approver role, over the window: decisions, expiries, waiting time and the
    takeover rate (the share of decided requests the person rejected)."""
    roles: dict[str, dict[str, Any]] = {}
    for d in act.days:
        for name, r in d.approvals_by_role.items():
            t = roles.setdefault(name, {"approved": 0, "rejected": 0, "expired": 0,
                                        "waits": []})
            t["approved"] += r.approved
            t["rejected"] += r.rejected
            t["expired"] += r.expired
            t["waits"].extend(r.waits)
    found = []
    for name, t in sorted(roles.items()):
        waits = sorted(t.pop("waits"))
        decided = t["approved"] + t["rejected"]
        found.append({
            "role": name, **t, "decided": decided,
            "takeover_rate": t["rejected"] / decided if decided else None,
            "wait_p50_s": _percentile(waits, 0.5), "wait_p90_s": _percentile(waits, 0.9),
        })
    return found


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


def _label(ts: float, hourly: bool) -> str:
    at = datetime.fromtimestamp(ts, UTC)
    return at.strftime("%Y-%m-%d %H:00") if hourly else at.strftime("%Y-%m-%d")

