"""``underway erase subject ID --by WHO --reason R``: erase a data subject by crypto-shredding
(:mod:`underway.privacy.erasure`); ``underway erase log``: the erasure log."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from ..ops.timeline import format_time
from ..privacy.erasure import ErasureRefused, erase_subject
from ..store.records import ErasureRecord
from ._common import DbOption, Problem, TenantOption, handle_errors, open_store

app = typer.Typer(help="Erase data subjects (crypto-shredding); the erasure log.",
                  no_args_is_help=True)

_BACKUPS = {
    "destroyed": "backups taken before cannot be opened either (the subject's secret in the "
                 "key provider's vault was destroyed)",
    "absent": "the key provider's vault held no secret for the subject (destroyed before, "
              "or never made)",
    "none": "backups taken before were NOT reached: the key provider keeps no subject "
            "vault, so a backup and the KEK still open what the subject's keys sealed",
}


@app.command("subject")
@handle_errors
def subject(
    ctx: typer.Context,
    subject_id: Annotated[str, typer.Argument(metavar="ID", help="The data subject's id.",
                                              show_default=False)],
    by: Annotated[str, typer.Option("--by", help="Who asks for the erasure (kept in the "
                                    "erasure log).", show_default=False)],
    reason: Annotated[str, typer.Option("--reason", help="Why (e.g. the data principal's "
                                        "request number).", show_default=False)],
    cancel_active: Annotated[bool, typer.Option(
        "--cancel-active", help="Ask the subject's active runs to cancel first, and wait "
        "for a worker to end them; without it an active run makes the erasure refuse.",
    )] = False,
    wait: Annotated[float, typer.Option("--wait", min=0, help="With --cancel-active: "
                                        "seconds to wait for the runs to end.")] = 60.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Erase data subject ID: reduce its runs to their skeleton (event types, times, policy
    outcomes; the journal still verifies), delete its knowledge records, and destroy its
    keys, so nothing sealed about it can be opened again. Refuses, destroying nothing,
    while a legal hold stands on the subject or its runs, or a run of it is active."""
    with open_store(ctx, db, need_keys=True) as store:
        try:
            done = erase_subject(store, subject_id, by=by, reason=reason, tenant_id=tenant,
                                 cancel_active=cancel_active, wait=wait)
        except ErasureRefused as exc:
            raise Problem(f"erasure refused: {exc}") from None
    rec = done.record
    if as_json:
        typer.echo(json.dumps({**asdict(rec), "purged": done.purged,
                               "already": done.already}, indent=2))
        return
    typer.echo(f"erased data subject {rec.subject!r} of tenant {rec.tenant_id!r} "
               f"(erasure #{rec.seq})")
    typer.echo(f"  runs reduced to their skeleton: {len(done.purged)}"
               + (f" (and {len(done.already)} already)" if done.already else ""))
    typer.echo(f"  knowledge records deleted: {rec.knowledge}")
    typer.echo(f"  data keys destroyed: {rec.keys}")
    typer.echo(f"  backups: {_BACKUPS[rec.vault]}")


@app.command("log")
@handle_errors
def log(
    ctx: typer.Context,
    subject_id: Annotated[str | None, typer.Option("--subject", help="Only this subject.",
                                                   show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tenant: Annotated[str | None, typer.Option(
        "--tenant", help="Only this tenant (default: every tenant).", show_default=False,
    )] = None,
    db: DbOption = None,
) -> None:
    """The erasure log: every erasure, who asked for it, why, and what it destroyed."""
    with open_store(ctx, db) as store:
        records = store.list_erasures(tenant, subject=subject_id)
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in records], indent=2))
        return
    if not records:
        typer.echo("no erasures")
        return
    for r in records:
        typer.echo(_line(r))


def _line(r: ErasureRecord) -> str:
    return (f"#{r.seq} {format_time(r.erased_at)} tenant={r.tenant_id} subject={r.subject} "
            f"by={r.by} runs={r.runs} knowledge={r.knowledge} keys={r.keys} "
            f"vault={r.vault} reason={r.reason}")
