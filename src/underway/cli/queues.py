"""``underway queues``: the limits of named queues, kept in the database for every worker."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from ..store.base import QueueConfig
from ._common import DbOption, Problem, handle_errors, open_store

app = typer.Typer(help="Set, list and remove queue limits.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The queue's name.", show_default=False)]


@app.command("set")
@handle_errors
def set_queue(
    ctx: typer.Context,
    name: NameArg,
    max_concurrency: Annotated[
        int | None,
        typer.Option("--max-concurrency", min=0,
                     help="At most this many runs of the queue leased at once, across all "
                     "workers (0 pauses the queue)."),
    ] = None,
    rate: Annotated[
        int | None,
        typer.Option("--rate", min=0,
                     help="At most this many runs started (first activation) per --per "
                     "seconds, in bursts of up to this many."),
    ] = None,
    per: Annotated[
        float, typer.Option("--per", help="The rate limit's period in seconds.")
    ] = 1.0,
    per_tenant: Annotated[
        bool, typer.Option("--per-tenant", help="Give each tenant its own rate limit.")
    ] = False,
    db: DbOption = None,
) -> None:
    """Set a queue's limits, replacing any it had (a limit not given is lifted)."""
    config = QueueConfig(name, max_concurrency=max_concurrency, rate_limit=rate,
                         rate_period_s=per, per_tenant=per_tenant)
    with open_store(ctx, db) as store:
        store.set_queue(config)
    typer.echo(f"queue {name!r}: {_describe(config)}")


@app.command("ls")
@handle_errors
def list_queues(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    db: DbOption = None,
) -> None:
    """List queues that have limits (any other queue has none)."""
    with open_store(ctx, db) as store:
        configs = store.list_queues()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(c) for c in configs], indent=2))
        return
    if not configs:
        typer.echo("no queue has limits")
        return
    width = max(len(c.name) for c in configs)
    for c in configs:
        typer.echo(f"{c.name:<{width}}  {_describe(c)}")


@app.command("rm")
@handle_errors
def remove_queue(ctx: typer.Context, name: NameArg, db: DbOption = None) -> None:
    """Remove a queue's limits (its runs stay where they are)."""
    with open_store(ctx, db) as store:
        if not store.delete_queue(name):
            raise Problem(f"queue {name!r} has no limits to remove")
    typer.echo(f"queue {name!r}: no limits")


def _describe(c: QueueConfig) -> str:
    parts = []
    if c.max_concurrency is not None:
        parts.append(f"at most {c.max_concurrency} leased at once")
    if c.rate_limit is not None:
        who = " per tenant" if c.per_tenant else ""
        parts.append(f"at most {c.rate_limit} started per {c.rate_period_s:g}s{who}")
    return ", ".join(parts) or "no limits"
