"""``underway access-log``: who read which run's data, when, where and why — through the API,
the console or this command line — and whether sensitive fields were shown; ``--verify``
checks the log's hash chain. ``underway apikeys access-log`` is the same command."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from ..ops.timeline import format_time
from ..store.access import verify_access_log
from ._common import (
    DbOption,
    Problem,
    handle_check_errors,
    open_store,
    parse_time,
    run_id_of,
)

app = typer.Typer(add_completion=False)

BROKEN = 1
"""Exit status of ``--verify`` when the chain is broken (as ``underway audit verify``)."""


@app.command("access-log")
@handle_check_errors
def access_log(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant whose log to read.")]
    = "default",
    run: Annotated[str | None, typer.Option(
        "--run", help="Only reads of this run: its id, or a prefix of exactly one run's id.",
        show_default=False)] = None,
    who: Annotated[str | None, typer.Option(
        "--who", help="Only reads by this API key name, or command-line user.",
        show_default=False)] = None,
    key: Annotated[str | None, typer.Option("--key", help="Only reads with this key id "
                                            "('cli': the command line).",
                                            show_default=False)] = None,
    purpose: Annotated[str | None, typer.Option("--purpose", help="Only reads for this "
                                                "purpose.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only reads at or after this time: ISO 8601 (UTC unless it has an "
        "offset) or epoch seconds.", show_default=False)] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="Only reads before this time.", show_default=False)] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Check the tenant's hash chain instead: exit 1 naming the first "
        "entry altered, inserted or following a deleted one.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: DbOption = None,
) -> None:
    """Who read which run's data, when, where and why; --verify its hash chain.

    Reads through the API and the console (API keys) and this command line (the OS user
    or --by), newest first, each with its purpose and whether it revealed sensitive
    fields."""
    since_at, until_at = parse_time(since, "--since"), parse_time(until, "--until")
    if verify and any(x is not None for x in (run, who, key, purpose, since, until)):
        raise Problem("--verify checks the whole chain of the tenant: give no filter with it")
    with open_store(ctx, db) as store:
        if verify:
            verdict = verify_access_log(store, tenant)
        else:
            if run is not None:
                # The log outlives the runs it names: a whole id of a deleted run still counts.
                run = run_id_of(store, tenant, run, known=lambda r: bool(
                    store.list_access(tenant, run_id=r, limit=1)))
            found = store.list_access(tenant, run_id=run, key_id=key, who=who,
                                      purpose=purpose, since=since_at, until=until_at,
                                      limit=limit)
    if verify:
        if as_json:
            typer.echo(json.dumps(asdict(verdict), indent=2))
        elif verdict.ok:
            legacy = (f" ({verdict.legacy} from before the chain, unchecked)"
                      if verdict.legacy else "")
            typer.echo(f"access log of tenant {tenant!r}: {verdict.entries} entries, chain "
                       f"intact{legacy}")
        else:
            typer.echo(f"access log of tenant {tenant!r} is broken at entry seq "
                       f"{verdict.bad_seq}: {verdict.problem}", err=True)
        if not verdict.ok:
            raise typer.Exit(BROKEN)
        return
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in found], indent=2))
        return
    if not found:
        of = f" of run {run}" if run is not None else ""
        typer.echo(f"no reads recorded{of} in tenant {tenant!r}")
        return
    for r in found:
        shown = "  revealed" if r.revealed else ""
        typer.echo(f"{format_time(r.at)}  {r.key_id} ({r.key_name or '-'})  {r.run_id}  "
                   f"{r.endpoint}  purpose={r.purpose!r}{shown}")

