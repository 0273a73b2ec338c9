"""``underway runs bulk``: one action on every run a filter selects.

Each command is a dry run unless ``--yes``: it prints how many runs match and would be
acted on, with the first ids. With ``--yes`` it acts run by run, printing a line per run as
it goes, then the counts. A run the action does not fit now is skipped, with the reason.
Running the same command again acts on nothing twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from ..client import BulkAction, BulkItem, BulkResult, KeySigner, RunFilter
from ..events import JSON
from ..guard.approvals import load_private_key, public_key_of
from ._common import (
    ConfigOption,
    DbOption,
    Failure,
    LabelFilterOption,
    Problem,
    TenantOption,
    handle_errors,
    open_client,
    parse_json,
)
from ._filters import FlowOption, SinceOption, StatusOption, UntilOption, run_filter

app = typer.Typer(help="Resume, cancel, resolve, answer or decide every run a filter "
                  "selects (a dry run unless --yes).", no_args_is_help=True)

PREVIEW = 10
"""Run ids a dry run prints."""

YesOption = Annotated[
    bool, typer.Option("--yes", help="Act. Without it the command is a dry run: it only "
                       "counts what it would do.")
]
ByOption = Annotated[
    str, typer.Option("--by", help="Who is acting (journaled with each run's action).",
                      show_default=False)
]
KeyOption = Annotated[
    Path | None,
    typer.Option("--key", help="An approver's private key file: sign each run's decision "
                 "(needed where runs settle only with signed resolutions).",
                 show_default=False),
]
AsOption = Annotated[
    str | None,
    typer.Option("--as", help="The approver id the key is registered under.",
                 show_default=False),
]
NeededKey = Annotated[
    Path, typer.Option("--key", help="Your private key file: each run's decision is "
                       "signed with it.", show_default=False)
]
NeededAs = Annotated[
    str, typer.Option("--as", help="Your approver id, as registered.", show_default=False)
]
CommentOption = Annotated[
    str, typer.Option("--comment", help="Why; signed and journaled with each decision.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]


@app.command("resume")
@handle_errors
def resume(
    ctx: typer.Context, by: ByOption, yes: YesOption = False,
    step: Annotated[str | None, typer.Option(
        "--step", help="Resume at this step instead of where each run stopped.",
        show_default=False)] = None,
    key: KeyOption = None, approver: AsOption = None,
    status: StatusOption = None, flow: FlowOption = None, since: SinceOption = None,
    label: LabelFilterOption = None,
    until: UntilOption = None, as_json: JsonFlag = False, tenant: TenantOption = "default",
    db: DbOption = None, config_file: ConfigOption = None,
) -> None:
    """Resume every dead run the filter selects (--status defaults to dead)."""
    _run(ctx, "resume", run_filter(status=status, flow=flow, since=since, until=until,
                    label=label),
         by=by, yes=yes, tenant=tenant, db=db, config_file=config_file, as_json=as_json,
         signer=_signer(key, approver, ""), step=step)


@app.command("cancel")
@handle_errors
def cancel(
    ctx: typer.Context, by: ByOption, yes: YesOption = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (journaled).")] = "",
    status: StatusOption = None, flow: FlowOption = None, since: SinceOption = None,
    label: LabelFilterOption = None,
    until: UntilOption = None, as_json: JsonFlag = False, tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Cancel every unfinished run the filter selects, at its next step boundary."""
    _run(ctx, "cancel", run_filter(status=status, flow=flow, since=since, until=until,
                    label=label),
         by=by, yes=yes, tenant=tenant, db=db, config_file=None, as_json=as_json,
         reason=reason)


@app.command("resolve")
@handle_errors
def resolve(
    ctx: typer.Context, by: ByOption,
    resolution: Annotated[str, typer.Option(
        "--resolution", help="succeeded: the effect happened (give --result); failed: it "
        "did not; retry: it may run again.", show_default=False)],
    yes: YesOption = False,
    result: Annotated[str | None, typer.Option(
        "--result", help="The effect's result as JSON (with --resolution succeeded).",
        show_default=False)] = None,
    key: KeyOption = None, approver: AsOption = None,
    status: StatusOption = None, flow: FlowOption = None, since: SinceOption = None,
    label: LabelFilterOption = None,
    until: UntilOption = None, as_json: JsonFlag = False, tenant: TenantOption = "default",
    db: DbOption = None, config_file: ConfigOption = None,
) -> None:
    """Resolve the escalation of every escalated run the filter selects (runs asking a
    question are skipped: answer them)."""
    if resolution not in ("succeeded", "failed", "retry"):
        raise Problem(f"--resolution must be succeeded, failed or retry, not {resolution!r}")
    _run(ctx, "resolve", run_filter(status=status, flow=flow, since=since, until=until,
                    label=label),
         by=by, yes=yes, tenant=tenant, db=db, config_file=config_file, as_json=as_json,
         signer=_signer(key, approver, ""), resolution=resolution,
         result=parse_json(result, "--result"))


@app.command("answer")
@handle_errors
def answer(
    ctx: typer.Context, key: NeededKey, approver: NeededAs,
    question: Annotated[str, typer.Option(
        "--question", help="The exact question the runs ask; runs asking another are "
        "skipped.", show_default=False)],
    text: Annotated[str, typer.Option(
        "--answer", help="The answer: JSON, or else taken as plain text.",
        show_default=False)],
    yes: YesOption = False, comment: CommentOption = "",
    status: StatusOption = None, flow: FlowOption = None, since: SinceOption = None,
    label: LabelFilterOption = None,
    until: UntilOption = None, as_json: JsonFlag = False, tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Sign one answer for every run the filter selects that asks the question, each
    signed for its own run, and send it."""
    try:
        value: JSON = json.loads(text)
    except ValueError:
        value = text
    _run(ctx, "answer", run_filter(status=status, flow=flow, since=since, until=until,
                    label=label),
         by=approver, yes=yes, tenant=tenant, db=db, config_file=None, as_json=as_json,
         signer=_signer(key, approver, comment), question=question, answer=value)


def _decide(action: Literal["approve", "reject"], doc: str) -> None:
    """Register ``underway runs bulk ACTION``: sign ``action`` of what each selected run
    waits on, and send it (``approve`` and ``reject`` differ only in the decision)."""

    @handle_errors
    def command(
        ctx: typer.Context, key: NeededKey, approver: NeededAs, yes: YesOption = False,
        comment: CommentOption = "",
        status: StatusOption = None, flow: FlowOption = None, since: SinceOption = None,
        label: LabelFilterOption = None,
        until: UntilOption = None, as_json: JsonFlag = False,
        tenant: TenantOption = "default", db: DbOption = None,
    ) -> None:
        _run(ctx, action, run_filter(status=status, flow=flow, since=since, until=until,
                                     label=label),
             by=approver, yes=yes, tenant=tenant, db=db, config_file=None, as_json=as_json,
             signer=_signer(key, approver, comment))

    command.__doc__ = doc
    app.command(action)(command)


_decide("approve", "Sign an approval of the exact action each selected run waits on, and "
        "send it.")
_decide("reject", "Sign a rejection of the action each selected run waits on, and send it.")


def _signer(key: Path | None, approver: str | None, comment: str) -> KeySigner | None:
    if key is None and approver is None:
        return None
    if key is None or approver is None:
        raise Problem("--key and --as go together: the key signs as that approver")
    return KeySigner(load_private_key(key), approver_id=approver, comment=comment)


def _run(ctx: typer.Context, action: BulkAction, chosen: RunFilter, *, by: str, yes: bool,
         tenant: str, db: str | None, config_file: Path | None, as_json: bool,
         **options: Any) -> None:
    """Run the bulk action, print its report; exit 1 when a run failed."""
    with open_client(ctx, db, config_file) as client:
        signer = options.get("signer")
        if isinstance(signer, KeySigner):
            registered = client.store.get_approver(tenant, signer.approver_id)
            if registered is None or registered.revoked_at is not None:
                raise Problem(f"no approver {signer.approver_id!r} in tenant {tenant!r} (or "
                              "revoked); register the key with `underway approvers add`")
            if registered.public_key != public_key_of(signer.private_key):
                raise Problem(f"the key is not the one registered for approver "
                              f"{signer.approver_id!r}")
        show = None if (as_json or not yes) else _line
        report = client.bulk(action, chosen, by=by, tenant_id=tenant, dry_run=not yes,
                             on_item=show, **options)
    if as_json:
        typer.echo(json.dumps(as_dict(report), indent=2))
    else:
        typer.echo(summary(report))
    if report.counts["failed"]:
        raise Failure(f"{report.counts['failed']} of {len(report.items)} runs failed")


def _line(item: BulkItem) -> None:
    note = f": {item.reason}" if item.reason else ""
    typer.echo(f"{item.outcome:<8} {item.run_id}{note}")


def as_dict(report: BulkResult) -> dict[str, Any]:
    """The report as JSON: the action, dry run, filter, counts and one item per run.

    Args:
        report: The bulk operation's report.
    """
    return {"action": report.action, "dry_run": report.dry_run,
            "filter": {k: v for k, v in report.filter.keywords().items() if v is not None},
            "matched": len(report.items), "counts": report.counts,
            "items": [{"run_id": i.run_id, "outcome": i.outcome, "reason": i.reason}
                      for i in report.items]}


def summary(report: BulkResult) -> str:
    """What a person reads of a report: the counts, and for a dry run the first ids.

    Args:
        report: The bulk operation's report.
    """
    c, n = report.counts, len(report.items)
    if report.dry_run:
        ids = report.ids("eligible")
        lines = [f"dry run: {n} runs match; {report.action} would act on {c['eligible']}, "
                 f"skip {c['skipped']}"]
        lines += [f"  {run_id}" for run_id in ids[:PREVIEW]]
        if len(ids) > PREVIEW:
            lines.append(f"  ... and {len(ids) - PREVIEW} more")
        reasons: dict[str, int] = {}
        for item in report.items:
            if item.outcome == "skipped":
                reasons[item.reason] = reasons.get(item.reason, 0) + 1
        lines += [f"  skip {k}: {v}" for k, v in sorted(reasons.items())]
        if c["eligible"]:
            lines.append("nothing was sent; run it again with --yes to act")
        return "\n".join(lines)
    return (f"{report.action}: {c['done']} sent, {c['skipped']} skipped, {c['failed']} "
            f"failed of {n} runs matched; each run acts on it at its next step boundary")
