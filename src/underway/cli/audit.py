"""``underway audit verify|anchor|keygen``: check the journals, and anchor their heads
outside the database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..guard.approvals import generate_keypair, load_private_key, write_private_key
from ..ops.audit import FileAnchorLog, Report, anchor, key_id, load_public_key, read_anchors
from ..ops.audit import verify as verify_journals
from ._common import (
    DbOption,
    Problem,
    TenantOption,
    handle_check_errors,
    handle_errors,
    open_store,
    run_id_of,
)

app = typer.Typer(help="Audit the journal.", no_args_is_help=True)

TAMPERED = 1
"""Exit status when a chain does not verify."""


@app.command("verify")
@handle_check_errors
def verify(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(help="Verify only this run (its id or a unique prefix; default: "
                       "every run of the tenant).",
                       show_default=False),
    ] = None,
    every_tenant: Annotated[
        bool, typer.Option("--all", help="Verify every run of every tenant.")
    ] = False,
    anchors: Annotated[
        Path | None,
        typer.Option("--anchors", help="An anchor log (`underway audit anchor --log`): also "
                     "prove today's journal extends every head it signed.",
                     show_default=False),
    ] = None,
    public_key: Annotated[
        str | None,
        typer.Option("--public-key", help="The anchor key's public key (base64, as "
                     "`underway audit keygen` prints it), or a file holding it.",
                     show_default=False),
    ] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Verify hash chains: exit 0 when every chain is intact, 1 when one was edited,
    deleted from, reordered or spliced — or, with --anchors, no longer extends a head
    signed outside the database."""
    if run is not None and every_tenant:
        raise Problem("give a run id or --all, not both")
    if (anchors is None) != (public_key is None):
        raise Problem("--anchors and --public-key go together: the log is only as good as "
                      "the key that checks it")
    trusted = None
    if anchors is not None and public_key is not None:
        trusted = read_anchors(FileAnchorLog(anchors).lines(), load_public_key(public_key))
    scope = None if every_tenant else tenant
    with open_store(ctx, db) as store:
        if run is not None:
            # A journal whose row is gone, or an anchored head, is still checked by its id.
            run = run_id_of(store, tenant, run, known=lambda r: bool(
                store.load_events(tenant, r)) or (
                trusted is not None and (tenant, r) in trusted.heads))
        report = verify_journals(store, tenant_id=scope, run_id=run, anchors=trusted)
    for finding in report.findings:
        typer.echo(finding.describe())
    _summary(report, anchored=trusted is not None)


def _summary(report: Report, *, anchored: bool) -> None:
    tenants = len(report.tenants)
    scope = f"{tenants} tenant{'s' if tenants != 1 else ''}"
    if not report.ok:
        runs = f"{report.bad_runs} of {report.runs} runs failed verification ({scope})"
        log = len(report.findings) - sum(1 for f in report.findings if f.run_id is not None)
        typer.echo(runs + (f"; {log} problem{'s' if log != 1 else ''} in the anchor log"
                           if log else ""))
        raise typer.Exit(TAMPERED)
    runs = f"{report.runs} run{'s' if report.runs != 1 else ''}"
    line = f"verified {runs}, {report.events} events in {scope}: every hash chain is intact"
    if anchored:
        line += (f" and extends every head of {report.anchors} anchor "
                 f"record{'s' if report.anchors != 1 else ''}")
    if report.forgotten:
        line += (f"; {report.forgotten} anchored run{'s' if report.forgotten != 1 else ''} "
                 "forgotten by retention, as the forget log says")
    typer.echo(line)


@app.command("anchor")
@handle_errors
def anchor_heads(
    ctx: typer.Context,
    key: Annotated[
        Path,
        typer.Option("--key", help="The anchor signing key (PEM, mode 0600), made by "
                     "`underway audit keygen`; keep it away from the database.",
                     show_default=False),
    ],
    log: Annotated[
        Path,
        typer.Option("--log", help="The anchor log to append to (JSON lines; created when "
                     "missing). Keep it where database insiders cannot rewrite it.",
                     show_default=False),
    ],
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Anchor only this tenant's runs (default: every "
                     "tenant).", show_default=False),
    ] = None,
    db: DbOption = None,
) -> None:
    """Sign the head of every run's journal and append the record to the anchor log."""
    private_key = load_private_key(key)
    with open_store(ctx, db) as store:
        record = anchor(store, private_key, FileAnchorLog(log), tenant_id=tenant)
    count = len(record.leaves)
    typer.echo(f"anchored {count} run{'s' if count != 1 else ''} as record {record.n} of "
               f"{log} (root {record.root[:16]}, key {record.key_id})")


@app.command("keygen")
@handle_errors
def keygen(
    out: Annotated[
        Path,
        typer.Option("--out", help="File to create for the private key (mode 0600); an "
                     "existing file is never overwritten.", show_default=False),
    ],
) -> None:
    """Make an anchor signing key: write the private key to --out, print the public key
    that `underway audit verify --public-key` checks anchors with."""
    pem, public = generate_keypair()
    write_private_key(out, pem)
    typer.echo(f"private key written to {out} (keep it away from the database and its "
               "administrators)")
    typer.echo(f"public key: {public}")
    typer.echo(f"key id: {key_id(load_public_key(public))}")
