"""``underway schedules``: list, add and remove cron schedules."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..client import Client
from ..ops.timeline import format_time
from ..scheduling.schedules import add_schedule, list_schedules, remove_schedule
from ._common import DbOption, Problem, handle_errors, open_store, parse_json

app = typer.Typer(help="List, add and remove cron schedules.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The schedule's name.", show_default=False)]
ScheduleTenant = Annotated[str, typer.Option("--tenant", help="Tenant the schedule belongs to.")]


@app.command("ls")
@handle_errors
def ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    tenant: ScheduleTenant = "default",
    db: DbOption = None,
) -> None:
    """List a tenant's schedules and when each fires next."""
    with open_store(ctx, db) as store:
        found = list_schedules(Client(store), tenant_id=tenant)
    if as_json:
        typer.echo(json.dumps([
            {
                "name": s.name, "flow": s.flow, "cron": s.cron, "timezone": s.timezone,
                "input": s.input, "queue": s.queue, "enabled": s.enabled,
                "next_fire_at": s.next_fire_at, "last_fired_at": s.last_fired_at,
                "created_at": s.created_at,
            }
            for s in found
        ], indent=2))
        return
    if not found:
        typer.echo(f"no schedules in tenant {tenant!r}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("NAME", "FLOW", "CRON", "ZONE", "NEXT (UTC)", "LAST (UTC)", "QUEUE", "STATE"):
        table.add_column(header, no_wrap=True)
    for s in found:
        table.add_row(
            s.name, s.flow, s.cron, s.timezone, format_time(s.next_fire_at)[:16],
            format_time(s.last_fired_at)[:16], s.queue, "enabled" if s.enabled else "disabled",
        )
    Console(width=None if sys.stdout.isatty() else 10_000, highlight=False).print(table)


@app.command("add")
@handle_errors
def add(
    ctx: typer.Context,
    name: NameArg,
    flow: Annotated[
        str,
        typer.Option("--flow", help="The flow each tick starts, by name; a worker that has "
                     "it registered starts the runs.", show_default=False),
    ],
    cron: Annotated[
        str,
        typer.Option("--cron", help="Five fields (minute hour day-of-month month "
                     "day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly.",
                     show_default=False),
    ],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone the expression is read in.")]
    = "UTC",
    input: Annotated[
        str | None, typer.Option("--input", help="Input of every run, as JSON.")
    ] = None,
    queue: Annotated[str, typer.Option("--queue", help="Queue the runs belong to.")] = "default",
    disabled: Annotated[
        bool, typer.Option("--disabled", help="Store it without firing (add again to enable).")
    ] = False,
    tenant: ScheduleTenant = "default",
    db: DbOption = None,
) -> None:
    """Add a schedule or replace one (an unchanged --cron and --tz keep its pending tick)."""
    data = parse_json(input, "--input")
    with open_store(ctx, db) as store:
        s = add_schedule(Client(store), name, flow, cron, data, tenant_id=tenant, timezone=tz,
                         queue=queue, enabled=not disabled)
    if s.enabled:
        typer.echo(f"schedule {s.name!r} starts flow {s.flow!r} at {s.cron!r} ({s.timezone}); "
                   f"next tick {format_time(s.next_fire_at)[:16]} UTC")
    else:
        typer.echo(f"schedule {s.name!r} stored, disabled")


@app.command("rm")
@handle_errors
def rm(ctx: typer.Context, name: NameArg, tenant: ScheduleTenant = "default",
       db: DbOption = None) -> None:
    """Remove a schedule; runs it already started carry on."""
    with open_store(ctx, db) as store:
        if not remove_schedule(Client(store), name, tenant_id=tenant):
            raise Problem(
                f"no schedule {name!r} in tenant {tenant!r}"
                + ("" if tenant != "default" else " (use --tenant for another tenant)")
            )
    typer.echo(f"schedule {name!r} removed")
