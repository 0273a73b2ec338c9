"""``underway apikeys``: API keys of ``underway serve`` (new, ls, revoke) and the access log
of reads of run data (``access-log``, the same as ``underway access-log``); ``underway
webhooks``: the secrets intake webhooks are signed with (set, ls, rm)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Annotated

import typer

from ..apikeys import ROLES, issue_key
from ..ops.timeline import format_time
from ..store.base import IntakeSecretRecord
from ..webhooks import new_secret
from ._common import DbOption, Problem, TenantOption, handle_errors, open_store
from .access import access_log

app = typer.Typer(help="Issue, list and revoke API keys; read the access log.",
                  no_args_is_help=True)
webhooks = typer.Typer(help="Set, list and remove the secrets intake webhooks are signed "
                       "with.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]
KeyTenant = Annotated[str, typer.Option("--tenant", help="The tenant the key acts in.")]


@app.command("new")
@handle_errors
def new(
    ctx: typer.Context,
    role: Annotated[str, typer.Option("--role", help=f"One of: {', '.join(ROLES)}.",
                                      show_default=False)],
    name: Annotated[str, typer.Option("--name", help="Who or what uses it (shown in the "
                                      "access log and journals).")] = "",
    tenant: KeyTenant = "default",
    db: DbOption = None,
) -> None:
    """Issue a key and print its token once (only a hash of it is stored)."""
    if role not in ROLES:
        raise Problem(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    with open_store(ctx, db) as store:
        issued = issue_key(store, tenant_id=tenant, role=role, name=name, now=time.time())
    typer.echo(f"API key {issued.record.key_id} ({role} in tenant {tenant!r}"
               + (f", {name!r}" if name else "") + ")", err=True)
    typer.echo("its token, shown this once (send it as 'Authorization: Bearer <token>'):",
               err=True)
    typer.echo(issued.token)


@app.command("ls")
@handle_errors
def ls(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's keys.",
                                               show_default=False)] = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
) -> None:
    """List keys (never their tokens), oldest first, revoked ones included."""
    with open_store(ctx, db) as store:
        found = store.list_api_keys(tenant)
    if as_json:
        typer.echo(json.dumps([{k: v for k, v in asdict(r).items() if k != "token_hash"}
                               for r in found], indent=2))
        return
    if not found:
        typer.echo("no API keys" + (f" in tenant {tenant!r}" if tenant else ""))
        return
    for r in found:
        state = "active" if r.revoked_at is None else f"revoked {format_time(r.revoked_at)}"
        typer.echo(f"{r.key_id}  {r.tenant_id}  {r.role:<8}  {r.name or '-'}  "
                   f"created {format_time(r.created_at)}  {state}")


@app.command("revoke")
@handle_errors
def revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id.", show_default=False)],
    tenant: KeyTenant = "default",
    db: DbOption = None,
) -> None:
    """Revoke a key: it authenticates nothing from now on."""
    with open_store(ctx, db) as store:
        if not store.revoke_api_key(tenant, key_id, at=time.time()):
            raise Problem(f"no unrevoked API key {key_id!r} in tenant {tenant!r}")
    typer.echo(f"API key {key_id} revoked")


# The access log has its own command; this name is kept for scripts that used it.
app.command("access-log", help="The access log (the same as `underway access-log`).")(
    access_log)


SourceArg = Annotated[str, typer.Argument(help="The webhook source (the {source} of "
                                          "/v1/intake/{source}).", show_default=False)]


@webhooks.command("set")
@handle_errors
def set_secret(
    ctx: typer.Context,
    source: SourceArg,
    secret: Annotated[str | None, typer.Option("--secret", help="Use this secret (at least "
                                               "16 characters) instead of a random one.",
                                               show_default=False)] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Set (or rotate) a source's secret and print it. It is stored as given: an HMAC
    cannot be checked without it."""
    if secret is not None and len(secret) < 16:
        raise Problem("--secret must be at least 16 characters")
    value = secret or new_secret()
    with open_store(ctx, db) as store:
        store.put_intake_secret(IntakeSecretRecord(tenant, source, value, time.time()))
    typer.echo(f"webhook source {source!r} of tenant {tenant!r}; its secret:", err=True)
    typer.echo(value)


@webhooks.command("ls")
@handle_errors
def list_secrets(ctx: typer.Context, tenant: TenantOption = "default",
                 db: DbOption = None) -> None:
    """List a tenant's webhook sources (not their secrets)."""
    with open_store(ctx, db) as store:
        found = store.list_intake_secrets(tenant)
    if not found:
        typer.echo(f"no webhook sources in tenant {tenant!r}")
    for s in found:
        typer.echo(f"{s.source}  set {format_time(s.created_at)}")


@webhooks.command("rm")
@handle_errors
def remove_secret(ctx: typer.Context, source: SourceArg, tenant: TenantOption = "default",
                  db: DbOption = None) -> None:
    """Remove a source's secret: its deliveries are refused from now on."""
    with open_store(ctx, db) as store:
        if not store.delete_intake_secret(tenant, source):
            raise Problem(f"no webhook source {source!r} in tenant {tenant!r}")
    typer.echo(f"webhook source {source!r} removed")
