"""``underway activity``: what a tenant's runs did per day or per hour, with approvals per
approver role and each role's takeover rate; the figures of the console's metrics page."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from ..client._activity import DAY, MAX_DAYS, RoleApprovals
from ..ops.charts import duration
from ..store.access import ALL_RUNS, DEFAULT_PURPOSE
from ._common import (
    DbOption,
    PurposeOption,
    ReaderOption,
    TenantOption,
    fail,
    handle_errors,
    open_client,
    record_read,
)

app = typer.Typer(add_completion=False)

MAX_HOURLY_DAYS = 7
"""The longest window counted by hour."""


@app.command("activity")
@handle_errors
def activity(
    ctx: typer.Context,
    days: Annotated[int, typer.Option("--days", min=1, max=MAX_DAYS,
                                      help="The last N days (UTC), today included.")] = 1,
    by: Annotated[str, typer.Option("--by", help="'day' or 'hour' (hours: up to 7 days).")
                  ] = "hour",
    first: Annotated[str | None, typer.Option(
        "--from", help="The window's first day, YYYY-MM-DD (UTC); default: the last --days "
        "days.", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tenant: TenantOption = "default",
    purpose: PurposeOption = DEFAULT_PURPOSE,
    reader: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """What a tenant's runs did per day or per hour — runs created, model calls and cost,
    approvals decided and their wait, escalations, dead-letterings — and, per approver
    role, decisions and the takeover rate (the share of decided requests the person
    rejected). Counted from the journal; the read is written to the access log as one
    of run '*'."""
    if by not in ("day", "hour"):
        fail(f"--by is 'day' or 'hour', not {by!r}")
    if by == "hour" and days > MAX_HOURLY_DAYS:
        fail(f"by hour, --days is at most {MAX_HOURLY_DAYS}")
    hourly = by == "hour"
    since = (math.floor(time.time() / DAY) - days + 1) * DAY
    if first is not None:
        try:
            day = datetime.strptime(first, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            fail(f"--from {first!r} is not a day such as 2026-12-07")
        since = day.timestamp()
    with open_client(ctx, db) as client:
        act = client.activity(since=since, days=days, hourly=hourly, tenant_id=tenant)
        record_read(client.store, "activity", tenant, [ALL_RUNS], purpose=purpose, by=reader)
    roles: dict[str, RoleApprovals] = {}
    for d in act.days:
        for name, r in d.approvals_by_role.items():
            total = roles.setdefault(name, RoleApprovals())
            total.approved += r.approved
            total.rejected += r.rejected
            total.expired += r.expired
            total.waits.extend(r.waits)
    if as_json:
        typer.echo(json.dumps({
            "tenant": tenant, "by": by, "since": since, "until": act.until,
            "buckets": [dataclasses.asdict(d) for d in act.days],
            "roles": {name: {**dataclasses.asdict(r), "decided": r.decided,
                             "takeover_rate": r.takeover_rate}
                      for name, r in sorted(roles.items())},
        }, sort_keys=True))
        return
    fmt = "%Y-%m-%d %H:00" if hourly else "%Y-%m-%d"
    typer.echo(f"tenant {tenant}, per {by} (UTC)")
    typer.echo(f"{'WHEN':<17} {'RUNS':>5} {'MODEL':>6} {'COST':>9} {'DECIDED':>8} "
               f"{'MEDIAN WAIT':>12} {'EXPIRED':>8} {'ESCALATED':>10} {'DEAD':>5}")
    for d in act.days:
        waits = d.approval_waits
        median = duration(waits[(len(waits) - 1) // 2]) if waits else "-"
        typer.echo(f"{datetime.fromtimestamp(d.start, UTC).strftime(fmt):<17} "
                   f"{sum(d.runs.values()):>5} {d.model_calls:>6} {d.cost_usd:>9.4f} "
                   f"{len(waits):>8} {median:>12} {d.approvals_expired:>8} "
                   f"{sum(d.escalations.values()):>10} {d.dead_lettered:>5}")
    if not roles:
        typer.echo("no approval was decided or expired in the window")
        return
    typer.echo(f"\n{'APPROVER ROLE':<20} {'DECIDED':>8} {'APPROVED':>9} {'REJECTED':>9} "
               f"{'EXPIRED':>8} {'TAKEOVER':>9} {'MEDIAN WAIT':>12}")
    for name, r in sorted(roles.items()):
        r.waits.sort()
        rate = f"{r.takeover_rate:.0%}" if r.takeover_rate is not None else "-"
        median = duration(r.waits[(len(r.waits) - 1) // 2]) if r.waits else "-"
        typer.echo(f"{name:<20} {r.decided:>8} {r.approved:>9} {r.rejected:>9} "
                   f"{r.expired:>8} {rate:>9} {median:>12}")
