"""``underway runs``: list runs, show a run's timeline and events, steer a run."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated

import typer

from ..engine import Engine
from ..journal import Journal
from ..state import FINAL_STATUSES, RunState, fold
from ..timeline import format_time, render
from ._common import (
    DbOption,
    Problem,
    TenantOption,
    handle_errors,
    open_store,
    parse_json,
    require_run,
    warn_undeclared,
)

app = typer.Typer(help="List, inspect and steer runs.", no_args_is_help=True)

STATUSES = ("ready", "waiting", "escalated", "dead", "completed", "failed", "cancelled")
_STYLE = {
    "completed": "green", "failed": "red", "cancelled": "yellow", "escalated": "magenta",
    "dead": "bold red",
}

RunArg = Annotated[str, typer.Argument(help="The run id.", show_default=False)]
ByOption = Annotated[
    str, typer.Option("--by", help="Who is acting (journaled).", show_default=False)
]


@app.command("ls")
@handle_errors
def list_runs(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option("--status", help=f"Only runs with this status: {', '.join(STATUSES)}."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """List a tenant's runs, newest first."""
    if status is not None and status not in STATUSES:
        raise Problem(f"unknown status {status!r}; choose one of {', '.join(STATUSES)}")
    with open_store(ctx, db) as store:
        rows = store.list_runs(tenant, status=status, limit=limit)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
        return
    if not rows:
        typer.echo(f"no {status + ' ' if status else ''}runs in tenant {tenant!r}")
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("RUN", "FLOW", "STATUS", "STEP", "EVENTS", "UPDATED (UTC)", "NOTE"):
        table.add_column(header, no_wrap=True, justify="right" if header == "EVENTS" else "left")
    for r in rows:
        table.add_row(
            r.run_id, r.flow, Text(r.status, style=_STYLE.get(r.status, "")), r.step or "-",
            str(r.last_seq), format_time(r.updated_at), _note(r.error, r.waiting_signal),
        )
    # Piped output must not be cut to 80 columns: ids are meant to be copied.
    Console(width=None if sys.stdout.isatty() else 10_000, highlight=False).print(table)


def _note(error: str | None, waiting_signal: str | None) -> str:
    if waiting_signal:
        return f"waiting for signal {waiting_signal!r}"
    if error:
        return error if len(error) <= 60 else error[:59] + "…"
    return ""


@app.command("show")
@handle_errors
def show(ctx: typer.Context, run: RunArg, tenant: TenantOption = "default",
         db: DbOption = None) -> None:
    """Show a run's status, counts and a readable timeline of its events."""
    with open_store(ctx, db) as store:
        require_run(store, tenant, run)
        records = Journal(store).history(tenant, run)
    state = fold(records, start=RunState(tenant_id=tenant, run_id=run))
    typer.echo(render(state, records))


@app.command("events")
@handle_errors
def events(
    ctx: typer.Context,
    run: RunArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON array instead of JSON lines.")
    ] = False,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Print every event of a run, decoded: one JSON object per line (or an array)."""
    with open_store(ctx, db) as store:
        require_run(store, tenant, run)
        stored = store.load_events(tenant, run)
        records = Journal(store).decode(tenant, stored)
    items = []
    for s, rec in zip(stored, records, strict=True):
        data = rec.event.model_dump(mode="json")
        event_type = data.pop("type")
        items.append({
            "seq": rec.seq, "at": rec.at, "time": format_time(rec.at), "type": event_type,
            "hash": s.hash, "data": data,
        })
    if as_json:
        typer.echo(json.dumps(items, indent=2, ensure_ascii=False))
    else:
        for item in items:
            typer.echo(json.dumps(item, ensure_ascii=False, separators=(",", ":")))


@app.command("signal")
@handle_errors
def signal(
    ctx: typer.Context,
    run: RunArg,
    name: Annotated[str, typer.Argument(help="The signal's name.", show_default=False)],
    payload: Annotated[
        str | None, typer.Option("--payload", help="The signal's payload, as JSON.")
    ] = None,
    signal_id: Annotated[
        str | None,
        typer.Option("--id", help="Delivered once per id: resending the same id does nothing."),
    ] = None,
    sender: Annotated[str | None, typer.Option("--sender", help="Who sends it.")] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Deliver a signal to a run (a run waiting for it wakes up). A name the run's flow does
    not declare is refused; when the flow declares no signals it is sent with a warning."""
    if name.startswith("underway."):
        raise Problem(
            f"signal names starting with 'underway.' are reserved (got {name!r}); "
            "use `underway runs cancel` or `underway runs resolve`"
        )
    data = parse_json(payload, "--payload")
    with open_store(ctx, db) as store:
        row = require_run(store, tenant, run)
        engine = Engine(store)
        delivered = engine.signal(
            run, name, data, tenant_id=tenant, signal_id=signal_id, sender=sender
        )
        if name != row.waiting_signal and engine.declared_signals(run, tenant_id=tenant) is None:
            warn_undeclared(row.flow, name)
    if not delivered:
        typer.echo(f"signal id {signal_id!r} was already delivered to run {run}; nothing sent")
    elif row.status in FINAL_STATUSES:
        typer.echo(f"signal {name!r} stored, but run {run} is {row.status} and will not read it")
    else:
        typer.echo(f"signal {name!r} delivered to run {run}")


@app.command("cancel")
@handle_errors
def cancel(
    ctx: typer.Context,
    run: RunArg,
    by: ByOption,
    reason: Annotated[str, typer.Option("--reason", help="Why (journaled).")] = "",
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Cancel a run at its next step boundary."""
    with open_store(ctx, db) as store:
        row = require_run(store, tenant, run)
        if row.status in FINAL_STATUSES:
            raise Problem(f"run {run} is already {row.status}; nothing to cancel")
        Engine(store).cancel(run, by=by, reason=reason, tenant_id=tenant)
    typer.echo(f"cancellation of run {run} requested by {by}; it stops at its next step boundary")


@app.command("resolve")
@handle_errors
def resolve(
    ctx: typer.Context,
    run: RunArg,
    resolution: Annotated[
        str,
        typer.Option(
            "--resolution",
            help="succeeded: the effect happened (give --result); failed: it did not and "
            "must not be retried; retry: it did not happen and may run again.",
            show_default=False,
        ),
    ],
    by: ByOption,
    result: Annotated[
        str | None,
        typer.Option("--result", help="The effect's result as JSON (with --resolution succeeded)."),
    ] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Resolve a run's escalation, unsigned; the run continues from where it stopped.

    A worker started with --signed-resolutions refuses this: sign a resolution with
    `underway approvals resolve` instead.
    """
    if resolution not in ("succeeded", "failed", "retry"):
        raise Problem(f"--resolution must be succeeded, failed or retry, not {resolution!r}")
    data = parse_json(result, "--result")
    with open_store(ctx, db) as store:
        row = require_run(store, tenant, run)
        if row.status != "escalated":
            raise Problem(f"run {run} is {row.status}, not escalated; there is nothing to resolve")
        Engine(store).resolve(run, resolution=resolution, by=by, result=data, tenant_id=tenant)
    typer.echo(f"escalation of run {run} resolved as {resolution} by {by} (unsigned: a "
               "worker with --signed-resolutions refuses it)")


@app.command("resume")
@handle_errors
def resume(
    ctx: typer.Context,
    run: RunArg,
    by: ByOption,
    step: Annotated[
        str | None,
        typer.Option("--step", help="Resume at this step instead of where the run stopped.",
                     show_default=False),
    ] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Resume a dead run, unsigned: failed calls are tried again — each through the whole
    guard (policy, budgets, a fresh approval where one is required) — completed ones are
    not. A worker with ``--signed-resolutions`` refuses it; use ``underway approvals
    resolve RUN --outcome resume`` there."""
    with open_store(ctx, db) as store:
        row = require_run(store, tenant, run)
        if row.status != "dead":
            raise Problem(f"run {run} is {row.status}, not dead; only dead runs can be resumed")
        Engine(store).resume(run, by=by, step=step, tenant_id=tenant)
    where = f"at step {step}" if step else "where it stopped"
    typer.echo(f"run {run} resumed {where} by {by} (unsigned: a worker with "
               "--signed-resolutions refuses it; sign one with `underway approvals resolve "
               "RUN --outcome resume`)")
