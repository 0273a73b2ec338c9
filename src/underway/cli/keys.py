"""``underway keys``: approvers' signing keys, and the keys of encryption at rest — a keyring
file, a key-encryption key for the environment, tenants' data keys and their rotation."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..client import Client
from ..crypto import (
    ROTATION_FLOW,
    KeyringFile,
    new_kek,
    rotation_flow,
)
from ..crypto.rotation import envelope_of
from ..engine import Engine
from ..guard.approvals import generate_keypair, write_private_key
from ..ops.timeline import format_time
from ..runner import Runner
from ..store.base import FINAL, RunRecord
from ._common import (
    DbOption,
    Failure,
    KeyringOption,
    Problem,
    TenantOption,
    handle_errors,
    open_store,
)

app = typer.Typer(help="Approvers' signing keys; the keys of encryption at rest.",
                  no_args_is_help=True)

ByOption = Annotated[
    str, typer.Option("--by", help="Who is acting (journaled with the rotation).")
]


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
    """Create an approver's key pair: write the private key to --out and print the
    public key.

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


@app.command("init")
@handle_errors
def init(
    keyring: Annotated[
        Path,
        typer.Option("--keyring", help="The keyring file to create (mode 0600; an existing "
                     "file is never overwritten).", show_default=False),
    ],
) -> None:
    """Create a keyring file holding a fresh key-encryption key (KEK) for encryption at
    rest. Keep a copy of it somewhere safe: without it nothing sealed can be opened."""
    ring = KeyringFile.create(keyring)
    typer.echo(f"keyring {keyring} created (mode 0600) with key-encryption key "
               f"{ring.kek_id}")
    typer.echo("use it: [encryption] provider = \"keyring\", keyring = \"...\" in "
               "underway.toml, or --keyring / UNDERWAY_KEYRING")


@app.command("kek")
@handle_errors
def kek() -> None:
    """Print a fresh key-encryption key (base64 of 32 random bytes), for a provider that
    reads it from the environment (UNDERWAY_KEK, or [encryption] env)."""
    typer.echo(base64.b64encode(new_kek()).decode())


@app.command("ls")
@handle_errors
def list_keys(
    ctx: typer.Context,
    tenant: TenantOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: DbOption = None,
) -> None:
    """List a tenant's data keys (never their bytes) and its key rotations, newest
    last."""
    with open_store(ctx, db) as store:
        keys = store.list_data_keys(tenant)
        rotations = _rotations(store.list_runs(tenant, flow=ROTATION_FLOW, limit=1000))
    if as_json:
        typer.echo(json.dumps({
            "keys": [{"key_id": k.key_id, "state": k.state, "kek_id": k.kek_id,
                      "created_at": k.created_at, "scope": k.scope} for k in keys],
            "rotations": [{"run_id": r.run_id, "status": r.status,
                           "started_at": r.created_at, "updated_at": r.updated_at}
                          for r in rotations],
        }, indent=2))
        return
    if not keys:
        typer.echo(f"tenant {tenant!r} has no data keys (nothing of it is encrypted)")
    for k in keys:
        scope = f" scope {k.scope}" if k.scope else ""
        typer.echo(f"key {k.key_id}  {k.state:<9}  wrapped by {k.kek_id}  created "
                   f"{format_time(k.created_at)}{scope}")
    for r in rotations:
        typer.echo(f"rotation {r.run_id}  {r.status:<9}  started {format_time(r.created_at)}"
                   f"  last {format_time(r.updated_at)}")


def _rotations(rows: list[RunRecord]) -> list[RunRecord]:
    return sorted(rows, key=lambda r: (r.created_at, r.run_id))


@app.command("rotate")
@handle_errors
def rotate(
    ctx: typer.Context,
    by: ByOption,
    tenant: TenantOption = "default",
    kek_only: Annotated[
        bool,
        typer.Option("--kek-only", help="Only re-wrap the tenant's data keys under the "
                     "provider's current key-encryption key (cheap; no payload is "
                     "touched)."),
    ] = False,
    new_kek_: Annotated[
        bool,
        typer.Option("--new-kek", help="First add a fresh key-encryption key to the "
                     "keyring file and make it current (a keyring file provider only)."),
    ] = False,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Start the re-sealing and return: workers of the "
                     "database carry it on."),
    ] = False,
    keyring: KeyringOption = None,
    db: DbOption = None,
) -> None:
    """Rotate a tenant's keys: re-wrap its data keys under the current key-encryption key,
    make a new data key the one new payloads are sealed with (at once), and seal again
    under it the stored payloads the journal does not commit to — blobs, waiting signals,
    schedules' input — as a journaled rotation run that resumes where it stopped after a
    crash (run this again, or let a worker carry it on). Journal events and checkpoints
    stay under the key that sealed them (the hash chain covers their bytes); retired keys
    are kept to open them."""
    with open_store(ctx, db, keyring=keyring, need_keys=True) as store:
        envelope = envelope_of(store)
        if new_kek_:
            provider = envelope.keys.provider
            if not isinstance(provider, KeyringFile):
                raise Problem("--new-kek adds a key to a keyring file: give --keyring FILE "
                              "(for another provider, make its new key current there)")
            typer.echo(f"key-encryption key {provider.add_kek()} added to {provider.path} "
                       "and made current")
        rewrapped = envelope.keys.rewrap(tenant)
        typer.echo(f"{rewrapped} data keys of tenant {tenant!r} re-wrapped under "
                   f"{envelope.keys.provider.kek_id}")
        if kek_only:
            return
        client = Client(store)
        unfinished = [r for r in _rotations(store.list_runs(tenant, flow=ROTATION_FLOW,
                                                            limit=1000))
                      if r.status not in FINAL]
        if unfinished:
            run_id = unfinished[0].run_id
            typer.echo(f"resuming rotation {run_id}, which did not finish")
        else:
            rec = envelope.keys.rotate(tenant)
            run_id, _ = client.start(ROTATION_FLOW, {"key_id": rec.key_id, "by": by},
                                     tenant_id=tenant, idempotency_key=f"rotation:{rec.key_id}")
            typer.echo(f"data key {rec.key_id} is tenant {tenant!r}'s active key: new "
                       f"payloads are sealed with it; rotation {run_id} seals the stored ones "
                       "again")
        if no_wait:
            typer.echo("workers of this database carry the rotation on (`underway keys ls` "
                       "shows it)")
            return
        engine = Engine(store, flows=[rotation_flow(store)])
        row = asyncio.run(_drive(engine, tenant, run_id))
        if row.status != "completed":
            raise Failure(f"rotation {run_id} stopped {row.status}: {row.error}; see "
                          f"`underway runs show {run_id} --tenant {tenant}`, then run this "
                          "again")
        result = client.state(run_id, tenant_id=tenant).result
    done = result.get("resealed", {}) if isinstance(result, dict) else {}
    counts = ", ".join(f"{n} {kind}s" for kind, n in done.items()) or "nothing"
    typer.echo(f"rotation {run_id} completed: sealed again under the new key: {counts}")


async def _drive(engine: Engine, tenant_id: str, run_id: str) -> RunRecord:
    """Advance the rotation run (only it) until it ends or stops for a person; a lease a
    dead process on this host held (a rotation killed mid-way) is taken over at once."""
    runner = Runner(engine)
    while True:
        await engine.io(runner.reclaim_dead_local_leases)
        leases = await engine.io(functools.partial(engine.claim, tenant_id=tenant_id,
                                                   run_id=run_id))
        for lease in leases:
            await engine.activate(lease)
        row = await engine.io(engine.store.get_run, tenant_id, run_id)
        if row is None:
            raise Failure(f"rotation run {run_id} is gone")
        if row.status in FINAL or row.status in ("escalated", "dead"):
            return row
        await asyncio.sleep(0.2)
