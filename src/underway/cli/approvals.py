"""``underway approvals`` (requests waiting for a person: list, show, approve, reject,
answer, resolve) and ``underway approvers`` (who may sign: add, list, revoke).

Decisions are signed here, with the approver's private key file; only the signed decision
is sent to the run, which verifies it again before anything happens.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from ..client import Client, PendingRequest, redact_request
from ..events import JSON
from ..guard.approvals import (
    ApprovalCheck,
    ApproverRecord,
    load_private_key,
    public_key_of,
    register_approver,
    sign_decision,
    verify_decision,
)
from ..guard.approvals.decision import REASON_TEXT, Decision
from ..labels import label_text
from ..ops.timeline import time_left
from ..store.access import DEFAULT_PURPOSE
from ..store.base import Store
from ._common import (
    DbOption,
    Problem,
    PurposeOption,
    ReaderOption,
    RevealOption,
    TenantOption,
    find_run,
    handle_errors,
    open_client,
    open_store,
    record_read,
)

app = typer.Typer(
    help="Review and decide requests that wait for a person.", no_args_is_help=True
)
approvers = typer.Typer(help="Register and revoke the people who sign decisions.",
                        no_args_is_help=True)

RunArg = Annotated[
    str, typer.Argument(help="The run id, or a prefix of exactly one run's id.",
                        show_default=False)
]
KeyOption = Annotated[
    Path,
    typer.Option("--key", help="Your private key file (from `underway keys new`).",
                 show_default=False),
]
AsOption = Annotated[
    str, typer.Option("--as", help="Your approver id, as registered.", show_default=False)
]
CommentOption = Annotated[
    str, typer.Option("--comment", help="Why; signed and journaled with the decision.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


OUTCOMES = ("succeeded", "failed", "retry", "resume")
"""What a resolution may say of the escalated call: it happened, it did not, try again;
or, for a dead run, resume it (its calls pass the whole guard again)."""


def _load_request(client: Client, tenant: str, run: str) -> PendingRequest:
    row = find_run(client, tenant, run)
    request = client.pending_request(row.run_id, tenant_id=tenant)
    if request is None:
        raise Problem(f"run {row.run_id!r} waits for no approval, answer or resolution (it "
                      f"is {row.status})")
    return request


def _iso(at: float) -> str:
    if at == float("inf"):
        return "never"
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _pretty(value: JSON) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _console() -> Any:
    from rich.console import Console

    # Piped output must not be cut to 80 columns: ids are meant to be copied.
    return Console(width=None if sys.stdout.isatty() else 10_000, highlight=False)


# -- underway approvals ----------------------------------------------------------------------


@app.command("ls")
@handle_errors
def list_requests(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    as_json: JsonFlag = False,
    tenant: TenantOption = "default",
    purpose: PurposeOption = DEFAULT_PURPOSE,
    reveal: RevealOption = False,
    by: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """List runs that wait for an approval, an answer or a resolution, soonest expiry
    first, with their runs' labels (sensitive fields and labels redacted unless --reveal;
    the read is written to the access log)."""
    with open_client(ctx, db) as client:
        found = client.pending_requests(tenant_id=tenant, limit=limit)
        labels = client.run_labels([r.run_id for r in found], tenant_id=tenant,
                                   reveal=reveal)
        found = [redact_request(r, redactor=client.redactor(r.run_id, tenant_id=tenant,
                                                            reveal=reveal)) for r in found]
        record_read(client.store, "approvals ls", tenant, [r.run_id for r in found],
                    purpose=purpose, by=by, revealed=reveal)
    if as_json:
        typer.echo(json.dumps([{**_as_json(r), "labels": labels.get(r.run_id, {})}
                               for r in found], indent=2, ensure_ascii=False))
        return
    if not found:
        typer.echo(f"no runs wait for a person in tenant {tenant!r}")
        return
    from rich.table import Table
    from rich.text import Text

    now = time.time()
    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("RUN", "KIND", "SUMMARY", "MONEY", "ROLE", "EXPIRES (UTC)", "LEFT",
                   "LABELS"):
        table.add_column(header, no_wrap=True)
    for r in found:
        shown = ", ".join(f"{k}={label_text(v)}" for k, v in labels.get(r.run_id, {}).items())
        table.add_row(r.run_id, r.kind, Text(r.summary), Text(r.moves or ""),
                      r.required_role or "any", _iso(r.expires_at),
                      time_left(r.expires_at, now), Text(shown or "-"))
    _console().print(table)


def _as_json(r: PendingRequest) -> dict[str, JSON]:
    data = asdict(r)
    if data["expires_at"] == float("inf"):
        data["expires_at"] = None
    return data


@app.command("show")
@handle_errors
def show(
    ctx: typer.Context, run_id: RunArg, as_json: JsonFlag = False,
    tenant: TenantOption = "default", purpose: PurposeOption = DEFAULT_PURPOSE,
    reveal: RevealOption = False, by: ReaderOption = None, db: DbOption = None,
) -> None:
    """Show exactly what a run asks to be approved, answered or resolved.

    The fields its tool declares sensitive are redacted unless --reveal (the arguments'
    sha256 is of the exact values either way); secrets always are. The read is written to
    the access log (who, when, --purpose)."""
    with open_client(ctx, db) as client:
        r = _load_request(client, tenant, run_id)
        hide = client.redactor(r.run_id, tenant_id=tenant, reveal=reveal)
        record_read(client.store, "approvals show", tenant, [r.run_id], purpose=purpose,
                    by=by, revealed=reveal)
    r = redact_request(r, redactor=hide)
    if as_json:
        typer.echo(json.dumps(_as_json(r), indent=2))
        return
    now = time.time()
    out = [f"summary:       {r.summary}"]
    if r.moves:
        out.append(f"money:         {r.moves}")
    if r.kind == "approval":
        # What the approver weighs comes first: the evidence and the risks.
        if r.evidence is not None:
            out += ["evidence:", *("  " + line for line in _pretty(r.evidence).splitlines())]
        out.append("risks:         " + ("none stated" if not r.risks else ""))
        out += [f"  - {risk}" for risk in r.risks]
    out += [f"run:           {r.run_id} (tenant {tenant})", f"request:       {r.request_id}"]
    if r.kind == "approval":
        out += [
            f"action:        call tool {r.tool!r}",
            f"arguments:     sha256 {r.args_hash}",
            *("  " + line for line in _pretty(r.args).splitlines()),
        ]
    elif r.kind == "resolution":
        out += [f"escalated:     {r.question} (cause {r.cause})"]
        if r.tool:
            out += [
                f"call:          tool {r.tool!r}, idempotency key {r.key}",
                f"arguments:     sha256 {r.args_hash}",
                *("  " + line for line in _pretty(r.args).splitlines()),
            ]
        out.append("resolve with:  underway approvals resolve RUN --outcome resume [--step S]"
                   if r.cause == "dead" else
                   "resolve with:  underway approvals resolve RUN --outcome "
                   "succeeded|failed|retry [--result JSON]")
    else:
        out.append(f"question:      {r.question}")
        if r.context is not None:
            out += ["context:", *("  " + line for line in _pretty(r.context).splitlines())]
    out += [
        f"required role: {r.required_role or 'any registered approver'}",
        f"expires:       {_iso(r.expires_at)} ({time_left(r.expires_at, now)})",
    ]
    if r.rule_id is not None or r.policy_version is not None:
        out.append(f"policy:        rule {r.rule_id or '-'}, version {r.policy_version or '-'}")
    typer.echo("\n".join(out))


def _decide(
    ctx: typer.Context, run_id: str, key_file: Path, approver_id: str, tenant: str,
    db: str | None, *, decision: Decision, comment: str = "", answer: JSON = None,
    dead: bool = False,
) -> None:
    key = load_private_key(key_file)
    with open_client(ctx, db) as client:
        r = _load_request(client, tenant, run_id)
        run_id = r.run_id
        if dead != (r.cause == "dead"):
            raise Problem(
                f"run {run_id!r} is dead: resolve it with --outcome resume" if not dead
                else f"run {run_id!r} is not dead: --outcome resume resumes dead runs only")
        wanted = {"answer": "question", "resolve": "resolution"}.get(decision, "approval")
        if r.kind != wanted:
            how = {"question": "answer it with `underway approvals answer`",
                   "resolution": "resolve it with `underway approvals resolve`",
                   "approval": "decide it with `underway approvals approve` or `reject`"}
            raise Problem(f"run {run_id!r} waits for {_KIND_TEXT[r.kind]}, not "
                          f"{_KIND_TEXT[wanted]}; {how[r.kind]}")
        approver = _registered(client.store, tenant, approver_id)
        if approver.public_key != public_key_of(key):
            raise Problem(f"the key in {str(key_file)!r} is not the one registered for "
                          f"approver {approver_id!r}")
        # Approvals and answers take the client's one path (Client.decide, Client.answer).
        if decision in ("approve", "reject"):
            signed = client.decide(run_id, decision, key=key, approver_id=approver_id,
                                   comment=comment, tenant_id=tenant)
        elif decision == "answer":
            signed = client.answer(run_id, answer, key=key, approver_id=approver_id,
                                   comment=comment, tenant_id=tenant)
        if decision != "resolve":
            _sent(decision, r, approver_id, signed.nonce)
            return
        signed = sign_decision(
            key, request_id=r.request_id, run_id=r.run_id, tenant_id=tenant, tool=r.tool,
            args_hash=r.args_hash, decision=decision,
            expires_at=r.expires_at if r.expires_at != float("inf") else time.time() + 86400,
            approver_id=approver_id, comment=comment, answer=answer,
        )
        check = ApprovalCheck(
            request_id=r.request_id, run_id=r.run_id, tenant_id=tenant, tool=r.tool,
            args_hash=r.args_hash, required_role=r.required_role, expires_at=r.expires_at,
        )
        # The run verifies again; checking here first turns a doomed decision into a
        # clear message instead of a journaled refusal.
        reason = verify_decision(signed, check=check, approver=approver, now=time.time())
        if reason is not None:
            raise Problem(f"run {run_id!r} would refuse this decision: {REASON_TEXT[reason]} "
                          f"({reason})")
        client.submit_decision(signed.model_dump(mode="json"), tenant_id=tenant)
    _sent(decision, r, approver_id, signed.nonce)


def _sent(decision: Decision, r: PendingRequest, approver_id: str, nonce: str) -> None:
    what = {"approve": "approval", "reject": "rejection", "answer": "answer",
            "resolve": "resolution"}[decision]
    target = f"of {r.tool!r} (arguments sha256 {r.args_hash})" if r.tool else "to the question"
    typer.echo(f"{what} {target} signed by {approver_id!r} and sent to run {r.run_id!r} "
               f"(request {r.request_id}, nonce {nonce}); the run verifies it when it "
               "resumes")


_KIND_TEXT = {"approval": "an approval", "question": "an answer",
              "resolution": "a resolution"}


def _registered(store: Store, tenant: str, approver_id: str) -> ApproverRecord:
    approver = store.get_approver(tenant, approver_id)
    if approver is None:
        raise Problem(f"no approver {approver_id!r} in tenant {tenant!r}; register the "
                      "public key with `underway approvers add`")
    if approver.revoked_at is not None:
        raise Problem(f"approver {approver_id!r} was revoked at {_iso(approver.revoked_at)}")
    return approver


@app.command("approve")
@handle_errors
def approve(
    ctx: typer.Context, run_id: RunArg, key: KeyOption, approver_id: AsOption,
    comment: CommentOption = "", tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Sign an approval of the exact action the run waits on and send it to the run."""
    _decide(ctx, run_id, key, approver_id, tenant, db, decision="approve", comment=comment)


@app.command("reject")
@handle_errors
def reject(
    ctx: typer.Context, run_id: RunArg, key: KeyOption, approver_id: AsOption,
    comment: CommentOption = "", tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Sign a rejection of the action the run waits on and send it to the run."""
    _decide(ctx, run_id, key, approver_id, tenant, db, decision="reject", comment=comment)


@app.command("answer")
@handle_errors
def answer(
    ctx: typer.Context, run_id: RunArg, key: KeyOption, approver_id: AsOption,
    text: Annotated[
        str,
        typer.Option("--answer", help="The answer: JSON, or else taken as plain text.",
                     show_default=False),
    ],
    comment: CommentOption = "", tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Sign an answer to the question an escalated run asks and send it to the run."""
    try:
        value: JSON = json.loads(text)
    except ValueError:
        value = text
    _decide(ctx, run_id, key, approver_id, tenant, db, decision="answer", comment=comment,
            answer=value)


@app.command("resolve")
@handle_errors
def resolve(
    ctx: typer.Context, run_id: RunArg, key: KeyOption, approver_id: AsOption,
    outcome: Annotated[
        str,
        typer.Option("--outcome", help="succeeded (the call happened), failed (it did not) "
                     "or retry (run it again).", show_default=False),
    ],
    result: Annotated[
        str | None,
        typer.Option("--result", help="With succeeded: the call's result, as JSON (what "
                     "the outside system reports).", show_default=False),
    ] = None,
    step: Annotated[
        str | None,
        typer.Option("--step", help="With resume: the step to resume at (default: where "
                     "the run stopped).", show_default=False),
    ] = None,
    comment: CommentOption = "", tenant: TenantOption = "default", db: DbOption = None,
) -> None:
    """Sign a resolution of an escalated run (an unknown outcome, a deadline, a budget), or
    the resume of a dead run (``--outcome resume``), and send it to the run."""
    if outcome not in OUTCOMES:
        raise Problem(f"--outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    if result is not None and outcome != "succeeded":
        raise Problem("--result goes with --outcome succeeded only")
    if step is not None and outcome != "resume":
        raise Problem("--step goes with --outcome resume only")
    value: JSON = None
    if result is not None:
        try:
            value = json.loads(result)
        except ValueError as exc:
            raise Problem(f"--result is not JSON: {exc}") from None
    answer: JSON = {"resolution": outcome, "result": value}
    if outcome == "resume":
        answer = {"resolution": "resume", "step": step}
    _decide(ctx, run_id, key, approver_id, tenant, db, decision="resolve", comment=comment,
            answer=answer, dead=outcome == "resume")


# -- underway approvers ----------------------------------------------------------------------

ApproverArg = Annotated[str, typer.Argument(help="The approver's id.", show_default=False)]


@approvers.command("add")
@handle_errors
def add_approver(
    ctx: typer.Context,
    approver_id: ApproverArg,
    public_key: Annotated[
        str,
        typer.Option("--public-key", help="Base64 Ed25519 public key (printed by "
                     "`underway keys new`).", show_default=False),
    ],
    roles: Annotated[
        list[str],
        typer.Option("--role", help="A role the approver holds; repeat for several.",
                     show_default=False),
    ],
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Register an approver's public key and roles (again: replace them, lift a revocation)."""
    with open_store(ctx, db) as store:
        rec = register_approver(store, approver_id, public_key=public_key, roles=roles,
                                now=time.time(), tenant_id=tenant)
    typer.echo(f"approver {rec.approver_id!r} registered in tenant {tenant!r} with roles "
               f"{', '.join(rec.roles)}")


@approvers.command("ls")
@handle_errors
def list_approvers(
    ctx: typer.Context, as_json: JsonFlag = False, tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """List a tenant's approvers, revoked ones included."""
    with open_store(ctx, db) as store:
        found = store.list_approvers(tenant)
    if as_json:
        typer.echo(json.dumps([asdict(a) for a in found], indent=2))
        return
    if not found:
        typer.echo(f"no approvers in tenant {tenant!r}")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("APPROVER", "ROLES", "PUBLIC KEY", "ADDED (UTC)", "REVOKED (UTC)"):
        table.add_column(header, no_wrap=True)
    for a in found:
        table.add_row(a.approver_id, ",".join(a.roles), a.public_key, _iso(a.created_at),
                      "-" if a.revoked_at is None else _iso(a.revoked_at))
    _console().print(table)


@approvers.command("revoke")
@handle_errors
def revoke_approver(
    ctx: typer.Context, approver_id: ApproverArg, tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Revoke an approver: no decision they signed is accepted from now on, even one
    signed earlier."""
    with open_store(ctx, db) as store:
        if not store.revoke_approver(tenant, approver_id, at=time.time()):
            found = store.get_approver(tenant, approver_id)
            if found is None:
                raise Problem(f"no approver {approver_id!r} in tenant {tenant!r}")
            raise Problem(f"approver {approver_id!r} was already revoked at "
                          f"{_iso(found.revoked_at or 0.0)}")
    typer.echo(f"approver {approver_id!r} revoked in tenant {tenant!r}")
