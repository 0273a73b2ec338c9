"""``underway knowledge``: erasing long-term knowledge, by retention or on request, and
indexing it again after an upgrade changed how text is split into words."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..knowledge import open_knowledge
from ._common import DbOption, Problem, TenantOption, handle_errors, open_store

app = typer.Typer(
    help="Erase long-term knowledge (what has expired, or one record on request); index it "
    "again after an upgrade.",
    no_args_is_help=True,
)


@app.command("purge")
@handle_errors
def purge(
    ctx: typer.Context,
    db: DbOption = None,
    now: Annotated[
        float | None,
        typer.Option("--now", help="Erase what has expired at this time (epoch seconds) "
                     "instead of the current time.", show_default=False),
    ] = None,
) -> None:
    """Erase every knowledge record whose retention has run out; print how many."""
    with open_store(ctx, db) as store:
        erased = open_knowledge(store).purge_expired(time.time() if now is None else now)
    typer.echo(f"erased {erased} expired knowledge record{'s' * (erased != 1)}")


@app.command("rm")
@handle_errors
def rm(
    ctx: typer.Context,
    record_id: Annotated[str, typer.Argument(help="The record's id.", show_default=False)],
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Erase one knowledge record now (a request to erase personal data)."""
    with open_store(ctx, db) as store:
        erased = open_knowledge(store).delete(tenant, record_id)
    if not erased:
        raise Problem(f"no knowledge record {record_id!r} in tenant {tenant!r}")
    typer.echo(f"erased knowledge record {record_id!r} of tenant {tenant!r}")


@app.command("reindex")
@handle_errors
def reindex(
    ctx: typer.Context,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Only this tenant's records (default: every tenant's).",
                     show_default=False),
    ] = None,
    db: DbOption = None,
) -> None:
    """Index every knowledge record again under the words this version splits text into
    (after migration 0016: combining marks, such as Indic vowel signs, belong to their
    word). Sealed records need the keys (--keyring); safe to run again."""
    with open_store(ctx, db) as store:
        done = open_knowledge(store).reindex(tenant_id=tenant)
    typer.echo(f"indexed {done.records} knowledge record{'s' * (done.records != 1)} again")
    if done.sealed_without_keys:
        raise Problem(
            f"{done.sealed_without_keys} sealed record{'s' * (done.sealed_without_keys != 1)} "
            "left as they were: their tenant's keys are not here; run again with the keys "
            "(--keyring FILE before the command, or the [encryption] of underway.toml)")
