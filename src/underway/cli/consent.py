"""``underway consent``: record a data subject's consent to a purpose (``grant``), its
withdrawal (``withdraw``), and show where it stands, its history and the subject's runs
(``show``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from ..ops.timeline import format_time
from ..store.base import ConsentRecord
from ._common import DbOption, TenantOption, handle_errors, open_client

app = typer.Typer(help="Record and show data subjects' consent per purpose.",
                  no_args_is_help=True)

SubjectArg = Annotated[str, typer.Argument(help="The data subject, as an opaque id.",
                                           show_default=False)]
PurposeArg = Annotated[str, typer.Argument(help="The purpose, e.g. marketing.",
                                           show_default=False)]
ByOption = Annotated[str, typer.Option("--by", help="Who records the change (a person or "
                                       "system; kept with the record).", show_default=False)]
ReferenceOption = Annotated[
    str | None,
    typer.Option("--reference", help="The consent artefact: a consent manager's id, a "
                 "signed form's number.", show_default=False),
]


@app.command("grant")
@handle_errors
def grant(
    ctx: typer.Context, subject: SubjectArg, purpose: PurposeArg, by: ByOption,
    reference: ReferenceOption = None, tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Record that SUBJECT consents to PURPOSE from now on."""
    with open_client(ctx, db) as client:
        rec = client.grant_consent(subject, purpose, by=by, reference=reference,
                                   tenant_id=tenant)
    typer.echo(_line(rec))


@app.command("withdraw")
@handle_errors
def withdraw(
    ctx: typer.Context, subject: SubjectArg, purpose: PurposeArg, by: ByOption,
    reference: ReferenceOption = None, tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Record that SUBJECT withdraws consent to PURPOSE: from now on, every call of the
    subject's runs that a policy rule requires this consent for is denied (journaled)."""
    with open_client(ctx, db) as client:
        rec = client.withdraw_consent(subject, purpose, by=by, reference=reference,
                                      tenant_id=tenant)
    typer.echo(_line(rec))


@app.command("show")
@handle_errors
def show(
    ctx: typer.Context, subject: SubjectArg,
    purpose: Annotated[str | None, typer.Option("--purpose", help="Only this purpose.",
                                                show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Where SUBJECT's consent stands for each purpose, every change that led there, and
    the runs about SUBJECT."""
    with open_client(ctx, db) as client:
        current = client.consents(subject, tenant_id=tenant)
        history = client.consent_history(subject, purpose=purpose, tenant_id=tenant)
        runs = client.runs_of_subject(subject, tenant_id=tenant)
    if purpose is not None:
        current = {p: r for p, r in current.items() if p == purpose}
    if as_json:
        typer.echo(json.dumps({
            "subject": subject, "current": [asdict(r) for r in current.values()],
            "history": [asdict(r) for r in history],
            "runs": [{"run_id": r.run_id, "flow": r.flow, "status": r.status,
                      "purpose": r.purpose, "created_at": r.created_at} for r in runs],
        }, indent=2))
        return
    typer.echo(f"subject {subject!r} in tenant {tenant!r}")
    if not current:
        typer.echo("consent: none recorded" + (f" for {purpose!r}" if purpose else ""))
    for p, r in current.items():
        typer.echo(f"consent to {p}: {r.state} since {format_time(r.at)}"
                   + (f" (reference {r.reference})" if r.reference else ""))
    if history:
        typer.echo("history:")
        for r in history:
            typer.echo(f"  {_line(r)}")
    typer.echo(f"runs: {len(runs)}")
    for row in runs:
        typer.echo(f"  {row.run_id}  {row.flow}  {row.status}  purpose {row.purpose}  "
                   f"created {format_time(row.created_at)}")


def _line(r: ConsentRecord) -> str:
    ref = f", reference {r.reference}" if r.reference else ""
    return (f"#{r.seq} {format_time(r.at)}  {r.subject}  {r.purpose}  {r.state}  "
            f"(by {r.by}{ref})")
