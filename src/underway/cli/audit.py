"""``underway audit verify``: check the hash chains of runs."""

from __future__ import annotations

from typing import Annotated

import typer

from ..journal import Journal, Verification
from ._common import DbOption, Problem, TenantOption, handle_errors, open_store

app = typer.Typer(help="Audit the journal.", no_args_is_help=True)

TAMPERED = 1
"""Exit status when a chain does not verify."""


def describe(v: Verification) -> str:
    """One line naming a run that failed verification, where, and why."""
    at = f" at seq {v.bad_seq}" if v.bad_seq is not None else ""
    return f"TAMPERED run {v.run_id} in tenant {v.tenant_id!r}{at}: {v.reason}"


@app.command("verify")
@handle_errors
def verify(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(help="Verify only this run (default: every run of the tenant).",
                       show_default=False),
    ] = None,
    every_tenant: Annotated[
        bool, typer.Option("--all", help="Verify every run of every tenant.")
    ] = False,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Verify hash chains: exit 0 when every chain is intact, 1 when one was edited,
    deleted from, reordered or spliced."""
    if run is not None and every_tenant:
        raise Problem("give a run id or --all, not both")
    results: list[Verification] = []
    with open_store(ctx, db) as store:
        journal = Journal(store)
        if run is not None:
            if store.get_run(tenant, run) is None and not store.load_events(tenant, run):
                raise Problem(f"no run {run!r} in tenant {tenant!r}")
            targets = [(tenant, run)]
        else:
            targets = store.journaled_runs(None if every_tenant else tenant)
        for t, r in targets:
            results.append(journal.verify(t, r))
    bad = [v for v in results if not v.ok]
    for v in bad:
        typer.echo(describe(v))
    events = sum(v.events for v in results)
    tenants_seen = len({v.tenant_id for v in results})
    scope = f"{tenants_seen} tenant{'s' if tenants_seen != 1 else ''}"
    if bad:
        typer.echo(f"{len(bad)} of {len(results)} runs failed verification ({scope})")
        raise typer.Exit(TAMPERED)
    typer.echo(
        f"verified {len(results)} run{'s' if len(results) != 1 else ''}, {events} events "
        f"in {scope}: every hash chain is intact"
    )
