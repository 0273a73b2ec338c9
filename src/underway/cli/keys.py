"""``underway keys``: make an approver's Ed25519 key pair."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..approvals import generate_keypair, write_private_key
from ._common import handle_errors

app = typer.Typer(help="Make approvers' signing keys.", no_args_is_help=True)


@app.command("new")
@handle_errors
def new(
    out: Annotated[
        Path,
        typer.Option("--out", help="File to create for the private key (mode 0600); an "
                     "existing file is never overwritten.", show_default=False),
    ],
    approver: Annotated[
        str | None,
        typer.Option("--approver", help="The approver's id, filled into the printed "
                     "`underway approvers add` command.", show_default=False),
    ] = None,
) -> None:
    """Create a key pair: write the private key to --out and print the public key.

    The private key stays with the approver; an operator registers the public key with
    `underway approvers add`.
    """
    pem, public_key = generate_keypair()
    write_private_key(out, pem)
    who = shlex.quote(approver) if approver else "APPROVER_ID"
    typer.echo(f"private key written to {out} (keep it secret; it signs your decisions)")
    typer.echo(f"public key: {public_key}")
    typer.echo("register it with:")
    typer.echo(f"  underway approvers add {who} --public-key {public_key} --role ROLE")
