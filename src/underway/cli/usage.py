"""``underway usage``: what a tenant's runs spent, derived from the journal."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from ..codec import ENCRYPTED
from ..guard.budgets import TenantUsage
from ..store.access import ALL_RUNS, DEFAULT_PURPOSE
from ._common import (
    DbOption,
    PurposeOption,
    ReaderOption,
    TenantOption,
    fail,
    handle_errors,
    open_store,
    record_read,
)

app = typer.Typer(add_completion=False)


@app.command("usage")
@handle_errors
def usage(
    ctx: typer.Context,
    tenant: TenantOption = "default",
    since: Annotated[
        str | None,
        typer.Option("--since", help="ISO 8601 time with offset (default: 00:00 UTC today).",
                     show_default=False),
    ] = None,
    days: Annotated[
        float | None, typer.Option("--days", help="The last N days instead of --since.",
                                   show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    purpose: PurposeOption = DEFAULT_PURPOSE,
    by: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """Tokens, model cost, model and tool calls, messages and money moved by a tenant's runs
    since a time — counted from the journal, so nothing lost in a crash is missed. The
    read is written to the access log as one of run '*' (all the tenant's runs)."""
    if since is not None and days is not None:
        fail("give --since or --days, not both")
    if days is not None:
        start = time.time() - days * 86400
    elif since is not None:
        try:
            parsed = datetime.fromisoformat(since)
        except ValueError:
            fail(f"--since {since!r} is not an ISO 8601 time")
        if parsed.tzinfo is None:
            fail(f"--since {since!r} needs a time zone offset (e.g. +05:30 or Z)")
        start = parsed.timestamp()
    else:
        now = datetime.now(UTC)
        start = datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp()
    with open_store(ctx, db) as store:
        counter = TenantUsage(tenant, since=start)
        u = counter.refresh(store)
        record_read(store, "usage", tenant, [ALL_RUNS], purpose=purpose, by=by)
    report = {
        "tenant": tenant, "since": datetime.fromtimestamp(start, UTC).isoformat(),
        "tokens_in": u.tokens_in, "tokens_out": u.tokens_out, "cost_usd": round(u.cost_usd, 6),
        "model_calls": u.model_calls, "tool_calls": u.tool_calls, "messages": u.messages,
        "money": u.money, "encrypted_runs": len(counter.encrypted),
    }
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    typer.echo(f"tenant {tenant} since {report['since']}")
    typer.echo(f"  model calls {u.model_calls}: {u.tokens_in:,} tokens in, "
               f"{u.tokens_out:,} out, ${u.cost_usd:,.4f}")
    typer.echo(f"  tool calls {u.tool_calls}, messages sent {u.messages}")
    for cur, amount in sorted(u.money.items()):
        typer.echo(f"  money moved: {amount:,.2f} {cur}")
    if counter.encrypted:
        typer.echo(f"  not counted: {len(counter.encrypted)} runs whose journals are "
                   f"{ENCRYPTED} and no key here opens them (give --keyring, or set "
                   "UNDERWAY_KEYRING or UNDERWAY_KEK)")
