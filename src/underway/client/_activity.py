"""What a tenant's runs did, day by day (UTC days of 86400 seconds) or hour by hour, over a
window: runs created by status, model calls with their tokens and cost, how long approvals
waited for a signed decision (in all and per approver role, with each role's takeover
rate), escalations by cause and dead-letterings. Counted from the runs table and the
journal, never from logs; nothing is kept between two calls.

A role's **takeover rate** is the share of its decided approval requests that the person
rejected: the run proposed an exact call and the person overrode it. A decision cannot
change a call's arguments (a changed call is a new request), so a rejection is the one way
a person takes a held action away from the run. Expired requests are counted apart; they
were decided by nobody.

What it reads: one grouped query on the runs table for the runs created in the window;
the ids of the runs written in the window (or leased now), on the (tenant, updated_at)
index; and, for those runs only, the events of :data:`ACTIVITY_EVENTS` — read on the
journal's primary key, :data:`~underway.store.journal.RUN_BATCH` runs a query, the other
events' payloads left unread — decoded with the blobs they refer to. A run that lived
through the window is read whole (its events of those kinds, from its first), since an
approval decided in the window may have been requested before it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from .. import events as ev
from ..errors import ConfigurationError, IntegrityError, KeyUnavailable
from ..journal import Journal
from ..store.base import Store
from ..store.journal import RUN_BATCH

DAY = 86_400.0
"""The length of a day of the window, in seconds."""
HOUR = 3_600.0
"""The length of an hour of the window, in seconds."""
ANY_ROLE = "any approver"
"""The role a request that requires none is counted under."""

MAX_DAYS = 366
"""The longest window :func:`activity` counts."""

ACTIVITY_EVENTS = (
    "ModelResponded", "ApprovalRequested", "ApprovalGranted", "ApprovalRejected",
    "ApprovalExpired", "Escalated", "RunDeadLettered",
)
"""The kinds of event the figures are counted from."""


@dataclass(slots=True)
class RoleApprovals:
    """The approval requests of one approver role decided or expired in a bucket."""

    approved: int = 0
    rejected: int = 0
    expired: int = 0
    waits: list[float] = field(default_factory=list)
    """Seconds from each request to its signed decision, shortest first."""

    @property
    def decided(self) -> int:
        """Requests approved or rejected."""
        return self.approved + self.rejected

    @property
    def takeover_rate(self) -> float | None:
        """Share of the decided requests the person rejected (None: none decided)."""
        return self.rejected / self.decided if self.decided else None


@dataclass(frozen=True, slots=True)
class ActivityDay:
    """What a tenant's runs did in one bucket of the window — a day, or an hour when the
    window is counted by hour — which starts at ``start`` (epoch seconds). Everything but
    ``runs`` counts events journaled in it."""

    start: float
    runs: dict[str, int]
    """Runs created that day, by the status they have now."""
    model_calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    approval_waits: list[float]
    """Seconds from each approval request to its signed decision (approved or rejected)
    for the decisions journaled that day, shortest first."""
    approvals_expired: int
    """Approval requests that expired that day without a valid decision."""
    escalations: dict[str, int]
    """Runs escalated to a person that day, by cause (``unknown_outcome``,
    ``question``, ``budget``, ``deadline``...)."""
    dead_lettered: int
    """Runs dead-lettered that day (a run dead-lettered twice counts twice)."""
    approvals_by_role: dict[str, RoleApprovals] = field(default_factory=dict)
    """Approval decisions and expiries by the role the request required
    (:data:`ANY_ROLE` when it required none)."""


@dataclass(frozen=True, slots=True)
class Activity:
    """What a tenant's runs did on each day of a window (:meth:`Client.activity
    <underway.client.Client.activity>`): ``days`` from ``since`` on, one
    :class:`ActivityDay` each. ``runs_read`` and ``events_read`` say what it cost;
    ``unreadable`` names runs whose journal could not be decoded (audit them) or is
    encrypted and cannot be opened here, which the figures leave out."""

    tenant_id: str
    since: float
    days: list[ActivityDay]
    runs_read: int
    events_read: int
    unreadable: list[str] = field(default_factory=list)
    width: float = DAY
    """The length of each bucket of ``days``: :data:`DAY` or :data:`HOUR`."""

    @property
    def until(self) -> float:
        """Where the window ends (not included)."""
        return self.since + len(self.days) * self.width


@dataclass(slots=True)
class _Tally:
    runs: dict[str, int] = field(default_factory=dict)
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    expired: int = 0
    escalations: Counter[str] = field(default_factory=Counter)
    dead: int = 0
    roles: dict[str, RoleApprovals] = field(default_factory=dict)

    def role(self, name: str | None) -> RoleApprovals:
        return self.roles.setdefault(name or ANY_ROLE, RoleApprovals())

    def day(self, start: float) -> ActivityDay:
        for r in self.roles.values():
            r.waits.sort()
        return ActivityDay(
            start=start, runs=dict(sorted(self.runs.items())), model_calls=self.model_calls,
            tokens_in=self.tokens_in, tokens_out=self.tokens_out,
            cost_usd=math.fsum(self.cost), approval_waits=sorted(self.waits),
            approvals_expired=self.expired, escalations=dict(sorted(self.escalations.items())),
            dead_lettered=self.dead, approvals_by_role=dict(sorted(self.roles.items())),
        )


def activity(
    store: Store, journal: Journal, tenant_id: str, *, since: float, days: int,
    hourly: bool = False,
) -> Activity:
    """What ``tenant_id``'s runs did on each of ``days`` days from ``since`` (epoch
    seconds; a midnight UTC for calendar days), or on each of their hours when
    ``hourly``."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise ConfigurationError(f"days must be a whole number from 1 to {MAX_DAYS}, "
                                 f"not {days!r}")
    if not math.isfinite(since):
        raise ConfigurationError(f"since must be a time in epoch seconds, not {since!r}")
    width = HOUR if hourly else DAY
    buckets = days * 24 if hourly else days
    until = since + days * DAY
    tallies = [_Tally() for _ in range(buckets)]
    for bucket, status, n in store.runs_created(tenant_id, since=since, until=until,
                                                width=width):
        tallies[bucket].runs[status] = n
    run_ids = store.runs_written(tenant_id, since=since, until=until)
    events_read, unreadable = 0, []
    for i in range(0, len(run_ids), RUN_BATCH):
        found = store.events_by_type(tenant_id, run_ids[i:i + RUN_BATCH], ACTIVITY_EVENTS)
        for run_id, stored in found.items():
            try:
                records = journal.decode(tenant_id, run_id, stored)
            except (IntegrityError, KeyUnavailable):
                unreadable.append(run_id)
                continue
            events_read += len(records)
            asked: dict[str, _Asked] = {}
            for rec in records:
                e = rec.event
                if isinstance(e, ev.ApprovalRequested):
                    asked[e.request_id] = _Asked(rec.at, e.required_role)
                elif isinstance(e, ev.PayloadPurged) and e.event_type == "ApprovalRequested":
                    role = e.kept.get("required_role")
                    asked[str(e.kept.get("request_id"))] = _Asked(
                        rec.at, role if isinstance(role, str) else None)
                bucket = math.floor((rec.at - since) / width)
                if not 0 <= bucket < buckets:
                    continue
                _count(tallies[bucket], e, rec.at, asked)
    return Activity(
        tenant_id=tenant_id, since=since,
        days=[t.day(since + n * width) for n, t in enumerate(tallies)],
        runs_read=len(run_ids), events_read=events_read, unreadable=unreadable, width=width,
    )


@dataclass(frozen=True, slots=True)
class _Asked:
    """When an approval request was made, and the role it required."""

    at: float
    role: str | None


def _decided(t: _Tally, asked: dict[str, _Asked], request_id: str, at: float,
             approved: bool) -> None:
    request = asked.get(request_id)
    if request is None:
        return
    wait = max(0.0, at - request.at)
    t.waits.append(wait)
    role = t.role(request.role)
    role.waits.append(wait)
    if approved:
        role.approved += 1
    else:
        role.rejected += 1


def _expired(t: _Tally, asked: dict[str, _Asked], request_id: str) -> None:
    t.expired += 1
    request = asked.get(request_id)
    t.role(request.role if request is not None else None).expired += 1


def _count(t: _Tally, e: ev.RunEvent, at: float, asked: dict[str, _Asked]) -> None:
    if isinstance(e, ev.PayloadPurged):
        _count_purged(t, e, at, asked)
    elif isinstance(e, ev.ModelResponded):
        t.model_calls += 1
        t.tokens_in += e.tokens_in
        t.tokens_out += e.tokens_out
        t.cost.append(e.cost_usd)
    elif isinstance(e, ev.ApprovalGranted | ev.ApprovalRejected):
        _decided(t, asked, e.request_id, at, isinstance(e, ev.ApprovalGranted))
    elif isinstance(e, ev.ApprovalExpired):
        _expired(t, asked, e.request_id)
    elif isinstance(e, ev.Escalated):
        t.escalations[e.cause] += 1
    elif isinstance(e, ev.RunDeadLettered):
        t.dead += 1


def _count_purged(t: _Tally, e: ev.PayloadPurged, at: float,
                  asked: dict[str, _Asked]) -> None:
    """What the skeleton of a purged event still counts, as :func:`_count` counts the
    event: model usage, approval waits, expiries, escalations by cause, dead-letterings."""
    k = e.kept
    if e.event_type == "ModelResponded":
        t.model_calls += 1
        t.tokens_in += _whole(k.get("tokens_in"))
        t.tokens_out += _whole(k.get("tokens_out"))
        cost = k.get("cost_usd")
        t.cost.append(float(cost) if isinstance(cost, int | float) else 0.0)
    elif e.event_type in ("ApprovalGranted", "ApprovalRejected"):
        _decided(t, asked, str(k.get("request_id")), at, e.event_type == "ApprovalGranted")
    elif e.event_type == "ApprovalExpired":
        _expired(t, asked, str(k.get("request_id")))
    elif e.event_type == "Escalated":
        t.escalations[str(k.get("cause") or "other")] += 1
    elif e.event_type == "RunDeadLettered":
        t.dead += 1


def _whole(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
