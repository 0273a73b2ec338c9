"""``underway runs``: start runs, list them, show a run's timeline and events, steer a run.

Every RUN argument takes a run's id or a prefix of exactly one run's id (as ``runs ls``
shows them at a terminal)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Annotated, Any

import typer

from ..client import Client, Recorded
from ..codec import ENCRYPTED
from ..events import JSON, PURGED, Encrypted, PayloadPurged
from ..flow import Flow
from ..labels import LabelValue, label_text, parse_labels, typed_value
from ..ops.timeline import format_time
from ..redaction import Redactor
from ..store.access import DEFAULT_PURPOSE
from ..store.base import FINAL, RunRecord
from ._common import (
    ConfigOption,
    DbOption,
    LabelFilterOption,
    LabelOption,
    Problem,
    PurposeOption,
    ReaderOption,
    RevealOption,
    TenantOption,
    app_code,
    find_run,
    handle_errors,
    open_client,
    parse_json,
    record_read,
    warn_undeclared,
)
from ._filters import FlowOption, SinceOption, StatusOption, UntilOption, run_filter
from ._timeline import render
from .bulk import app as bulk_app

app = typer.Typer(help="List, inspect and steer runs.", no_args_is_help=True)
app.add_typer(bulk_app, name="bulk")

_STYLE = {
    "completed": "green", "failed": "red", "cancelled": "yellow", "escalated": "magenta",
    "dead": "bold red",
}

RunArg = Annotated[
    str, typer.Argument(help="The run id, or a prefix of exactly one run's id.",
                        show_default=False)
]
SHORT_ID = 8
"""Characters of a run id ``runs ls`` shows at a terminal without ``--wide``."""
ByOption = Annotated[
    str, typer.Option("--by", help="Who is acting (journaled).", show_default=False)
]


@app.command("ls")
@handle_errors
def list_runs(
    ctx: typer.Context,
    status: StatusOption = None,
    flow: FlowOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 100,
    cursor: Annotated[
        str | None,
        typer.Option("--cursor", help="Go on from where a previous page ended (its "
                     "'next page' line names the cursor).", show_default=False),
    ] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="Full run ids and notes, whatever the terminal width.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    label: LabelFilterOption = None,
    reveal: RevealOption = False,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """List a tenant's runs, newest first, a page at a time, with their labels.

    At a terminal, run ids are cut to their first characters (any RUN argument takes such
    a prefix); --wide, --json and piped output show them whole. When more runs match, a
    last line on stderr gives the --cursor of the next page. Sensitive labels read
    [redacted] unless --reveal.
    """
    chosen = run_filter(status=status, flow=flow, since=since, until=until, label=label)
    with open_client(ctx, db) as client:
        page = client.list_runs(tenant_id=tenant, limit=limit, cursor=cursor,
                                **chosen.keywords())
        rows = page.runs
        # Only a completed run's end can name what shaped its result.
        taint = {r.run_id: client.tainted_by(r) for r in rows if r.status == "completed"}
        marks = {r.run_id: client.marks(r) for r in rows
                 if as_json and r.status == "completed"}
        waiting = {r.run_id: client.waiting_on(r) for r in rows}
        labels = client.run_labels([r.run_id for r in rows], tenant_id=tenant, reveal=reveal)
    if as_json:
        typer.echo(json.dumps([{**dataclasses.asdict(r), "tainted_by": taint.get(r.run_id),
                                "marks": marks.get(r.run_id),
                                "waiting": waiting[r.run_id],
                                "labels": labels.get(r.run_id, {})} for r in rows],
                              indent=2, ensure_ascii=False))
    elif not rows:
        what = " ".join(x for x in (status, f"{flow!r}" if flow else None) if x)
        typer.echo(f"no {what + ' ' if what else ''}runs in tenant {tenant!r}"
                   + (" on this page" if cursor else ""))
    else:
        _print_table(rows, taint, waiting, labels, wide=wide or not sys.stdout.isatty())
    if page.next_cursor is not None:
        typer.echo(f"next page: --cursor {page.next_cursor}", err=True)


def _print_table(rows: list[RunRecord], taint: dict[str, list[str] | None] | None = None,
                 waiting: dict[str, str | None] | None = None,
                 labels: dict[str, dict[str, LabelValue]] | None = None, *,
                 wide: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    labels = labels or {}
    # A column per label name the page has, in name order (the label columns).
    names = sorted({k for found in labels.values() for k in found})
    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("RUN", "FLOW", "STATUS", "STEP", "EVENTS", "CREATED (UTC)"):
        table.add_column(header, no_wrap=True, justify="right" if header == "EVENTS" else "left")
    for name in names:
        table.add_column(name.upper(), no_wrap=True)
    table.add_column("NOTE", no_wrap=True)
    for r in rows:
        have = labels.get(r.run_id, {})
        table.add_row(
            r.run_id if wide else r.run_id[:SHORT_ID], r.flow,
            Text(r.status, style=_STYLE.get(r.status, "")), r.step or "-", str(r.last_seq),
            format_time(r.created_at),
            *(Text(label_text(have[n])) if n in have else "-" for n in names),
            _note(r.error, (waiting or {}).get(r.run_id), (taint or {}).get(r.run_id)),
        )
    # Wide output is never cut to the terminal: ids are meant to be copied.
    Console(width=10_000 if wide else None, highlight=False).print(table)


def _note(error: str | None, waiting: str | None,
          tainted_by: list[str] | None = None) -> str:
    if tainted_by:
        return f"tainted by {', '.join(tainted_by)}"
    if waiting and waiting != "a worker":
        return f"waiting on {waiting}"
    if error:
        return error if len(error) <= 60 else error[:59] + "…"
    return ""


@app.command("show")
@handle_errors
def show(ctx: typer.Context, run: RunArg, tenant: TenantOption = "default",
         purpose: PurposeOption = DEFAULT_PURPOSE, reveal: RevealOption = False,
         by: ReaderOption = None, db: DbOption = None,
         every_event: Annotated[bool, typer.Option(
             "--events", help="One line per event instead of one row per step attempt.")]
         = False) -> None:
    """Show a run's status, counts and a readable timeline.

    By default one row per step attempt: when it started, how long it took, the worker
    that ran it, its calls with their durations and the wait it ended in. --events prints
    one line per event instead.

    The fields its tools declare sensitive are redacted unless --reveal; secrets always
    are; payloads this command has no key for read [encrypted]. The read is written to
    the access log (who, when, --purpose)."""
    with open_client(ctx, db) as client:
        run = find_run(client, tenant, run).run_id
        found = client.events(run, tenant_id=tenant)
        state = client.readable_state(run, tenant_id=tenant)
        children = {c.run_id: c.status or "not created"
                    for c in client.children(run, tenant_id=tenant)} if state.children else {}
        purges = client.store.purged_runs(tenant, run_id=run, limit=1) if state.purged else []
        record_read(client.store, "runs show", tenant, [run], purpose=purpose, by=by,
                    revealed=reveal)
    records = [Recorded(e.seq, e.at, e.event) for e in found]
    hide = Redactor(reveal=reveal).learn(r.event for r in records)
    typer.echo(render(state, records, children, hide, purges[0] if purges else None,
                      compact=not every_event))


@app.command("events")
@handle_errors
def events(
    ctx: typer.Context,
    run: RunArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON array instead of JSON lines.")
    ] = False,
    tenant: TenantOption = "default",
    purpose: PurposeOption = DEFAULT_PURPOSE,
    reveal: RevealOption = False,
    by: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """Print every event of a run, decoded: one JSON object per line (or an array).

    The fields its tools declare sensitive are redacted unless --reveal; secrets always
    are. The read is written to the access log (who, when, --purpose). An event whose
    payload retention purged shows its skeleton as its data and "payload": "[purged]"."""
    with open_client(ctx, db) as client:
        run = find_run(client, tenant, run).run_id
        found = client.events(run, tenant_id=tenant)
        record_read(client.store, "runs events", tenant, [run], purpose=purpose, by=by,
                    revealed=reveal)
    hide = Redactor(reveal=reveal).learn(e.event for e in found)
    items = []
    for e in found:
        data: JSON = hide.event(e.event).model_dump(mode="json")
        event_type = data.pop("type")
        item = {"seq": e.seq, "at": e.at, "time": format_time(e.at), "type": event_type,
                "hash": e.hash, "data": data}
        if isinstance(e.event, PayloadPurged):
            # The skeleton retention kept, under the purged event's own type.
            item.update(type=e.event.event_type, data=e.event.kept, payload=PURGED)
        if isinstance(e.event, Encrypted):
            # Sealed, and no key here: its own type, its payload "[encrypted]".
            item.update(type=e.event.event_type, data=ENCRYPTED)
        items.append(item)
    if as_json:
        typer.echo(json.dumps(items, indent=2, ensure_ascii=False))
    else:
        for item in items:
            typer.echo(json.dumps(item, ensure_ascii=False, separators=(",", ":")))


@app.command("stream")
@handle_errors
def stream(
    ctx: typer.Context,
    run: RunArg,
    after: Annotated[int, typer.Option("--after", min=0, help=(
        "Start after this offset (the last one seen)."))] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each delta with its offset as JSON lines.")
    ] = False,
    tenant: TenantOption = "default",
    purpose: PurposeOption = DEFAULT_PURPOSE,
    reveal: RevealOption = False,
    by: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """Follow a run's live model output: the tokens and tool-call deltas of its streamed
    model calls, as they arrive, until the run has finished (docs/models.md#streaming).

    Text is printed as it comes; a call that starts over says so on a line of its own.
    The deltas pass the run's redactor. The read is written to the access log."""
    with open_client(ctx, db) as client:
        run = find_run(client, tenant, run).run_id
        hide = client.redactor(run, tenant_id=tenant, reveal=reveal)
        record_read(client.store, "runs stream", tenant, [run], purpose=purpose, by=by,
                    revealed=reveal)

        async def follow() -> None:
            async for d in client.stream(run, after=after, tenant_id=tenant):
                delta = hide.json(d.delta)
                if as_json:
                    typer.echo(json.dumps({**d.to_json(), "delta": delta},
                                          ensure_ascii=False, separators=(",", ":")))
                    continue
                kind = delta.get("type") if isinstance(delta, dict) else None
                if kind == "text" and isinstance(delta, dict):
                    sys.stdout.write(str(delta.get("text", "")))
                elif kind == "tool_call" and isinstance(delta, dict):
                    sys.stdout.write(f"\n[tool {delta['name']}] " if delta.get("name")
                                     else str(delta.get("arguments") or ""))
                elif kind == "restart" and isinstance(delta, dict):
                    sys.stdout.write(f"\n[restart: attempt {delta.get('attempt')}]\n")
                elif kind == "done":
                    sys.stdout.write("\n")
                sys.stdout.flush()

        asyncio.run(follow())


@app.command("start")
@handle_errors
def start(
    ctx: typer.Context,
    flow: Annotated[str, typer.Argument(help="The flow to run, by name.", show_default=False)],
    input: Annotated[
        str | None, typer.Option("--input", help="The run's input, as JSON.")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Idempotency key: starting again with the same key finds "
                     "the run it started instead of starting another.", show_default=False),
    ] = None,
    queue: Annotated[str, typer.Option("--queue", help="Queue whose workers run it.")]
    = "default",
    app_spec: Annotated[
        str | None,
        typer.Option("--app", help="The flows, as module:attribute (as for `underway "
                     "worker`): check the input against the flow now.", show_default=False),
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option("--subject", help="The data subject the run is about, as an opaque id "
                     "(a customer number, never the personal data itself).",
                     show_default=False),
    ] = None,
    purpose: Annotated[
        str, typer.Option("--purpose", help="What the run is for (policies may require the "
                          "subject's consent for it).")
    ] = "operations",
    consent: Annotated[
        str | None,
        typer.Option("--consent", help="The reference of the consent the run acts on.",
                     show_default=False),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"run_id": ..., "created": ...}.')
    ] = False,
    label: LabelOption = None,
    sensitive_label: Annotated[list[str] | None, typer.Option(
        "--sensitive-label", help="A label shown redacted to viewers without --reveal, "
        "as name=value (repeat for more).", show_default=False)] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Start a run of a flow by name; a worker that has the flow runs it.

    Without --app this command has no flow code: the input is journaled as given, and the
    first worker that runs the flow checks it before any step runs, failing the run
    (InvalidInput, shown by `underway runs show`) when it does not match the flow's input
    model. With --app the input is checked now and nothing is stored when it is wrong.
    """
    data = parse_json(input, "--input")
    plain = {k: typed_value(v) for k, v in parse_labels(label or (), field="--label").items()}
    hidden = {k: typed_value(v) for k, v in
              parse_labels(sensitive_label or (), field="--sensitive-label").items()}
    flows: list[Flow[Any, Any]] = []
    if app_spec is not None:
        flows = app_code(app_spec)[0]
    with open_client(ctx, db) as client:
        if flows:
            client = Client(client.store, flows=flows)
        # Without the flow's code a mistyped name is caught by nobody: say when the name
        # is new to the tenant.
        new_name = not flows and not client.list_runs(tenant_id=tenant, flow=flow, limit=1).runs
        run_id, created = client.start(flow, data, tenant_id=tenant, idempotency_key=key,
                                       queue=queue, subject=subject, purpose=purpose,
                                       consent=consent, labels={**plain, **hidden},
                                       sensitive_labels=hidden)
    if new_name:
        typer.echo(f"note: tenant {tenant!r} has no earlier run of flow {flow!r}; only a "
                   "worker that has a flow of that name runs it (check the name, or pass "
                   "--app to check it now)", err=True)
    if as_json:
        typer.echo(json.dumps({"run_id": run_id, "created": created}))
    elif created:
        typer.echo(f"started run {run_id} of flow {flow!r}")
    else:
        typer.echo(f"run {run_id} was already started with key {key!r}; nothing started")


@app.command("signal")
@handle_errors
def signal(
    ctx: typer.Context,
    run: RunArg,
    name: Annotated[str, typer.Argument(help="The signal's name.", show_default=False)],
    payload: Annotated[
        str | None, typer.Option("--payload", help="The signal's payload, as JSON.")
    ] = None,
    signal_id: Annotated[
        str | None,
        typer.Option("--id", help="Delivered once per id: resending the same id does nothing."),
    ] = None,
    sender: Annotated[str | None, typer.Option("--sender", help="Who sends it.")] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Deliver a signal to a run (a run waiting for it wakes up). A name the run's flow does
    not declare is refused; when the flow declares no signals it is sent with a warning."""
    if name.startswith("underway."):
        raise Problem(
            f"signal names starting with 'underway.' are reserved (got {name!r}); "
            "use `underway runs cancel` or `underway runs resolve`"
        )
    data = parse_json(payload, "--payload")
    with open_client(ctx, db) as client:
        row = find_run(client, tenant, run)
        run = row.run_id
        delivered = client.signal(
            run, name, data, tenant_id=tenant, signal_id=signal_id, sender=sender
        )
        if name != row.waiting_signal and client.declared_signals(run, tenant_id=tenant) is None:
            warn_undeclared(row.flow, name)
    if not delivered:
        typer.echo(f"signal id {signal_id!r} was already delivered to run {run}; nothing sent")
    elif row.status in FINAL:
        typer.echo(f"signal {name!r} stored, but run {run} is {row.status} and will not read it")
    else:
        typer.echo(f"signal {name!r} delivered to run {run}")


@app.command("cancel")
@handle_errors
def cancel(
    ctx: typer.Context,
    run: RunArg,
    by: ByOption,
    reason: Annotated[str, typer.Option("--reason", help="Why (journaled).")] = "",
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Cancel a run at its next step boundary."""
    with open_client(ctx, db) as client:
        row = find_run(client, tenant, run)
        run = row.run_id
        if row.status in FINAL:
            raise Problem(f"run {run} is already {row.status}; nothing to cancel")
        client.cancel(run, by=by, reason=reason, tenant_id=tenant)
    typer.echo(f"cancellation of run {run} requested by {by}; it stops at its next step boundary")


@app.command("resolve")
@handle_errors
def resolve(
    ctx: typer.Context,
    run: RunArg,
    resolution: Annotated[
        str,
        typer.Option(
            "--resolution",
            help="succeeded: the effect happened (give --result); failed: it did not and "
            "must not be retried; retry: it did not happen and may run again.",
            show_default=False,
        ),
    ],
    by: ByOption,
    result: Annotated[
        str | None,
        typer.Option("--result", help="The effect's result as JSON (with --resolution succeeded)."),
    ] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Resolve a run's escalation, unsigned; the run continues from where it stopped.

    Where runs settle only with signed resolutions ([approvals] signed_resolutions in
    the deployment's config: --config, else ./underway.toml) this is refused and nothing
    is sent: sign a resolution with `underway approvals resolve` instead.
    """
    if resolution not in ("succeeded", "failed", "retry"):
        raise Problem(f"--resolution must be succeeded, failed or retry, not {resolution!r}")
    data = parse_json(result, "--result")
    with open_client(ctx, db, config_file) as client:
        run = find_run(client, tenant, run).run_id
        client.resolve(run, resolution=resolution, by=by, result=data, tenant_id=tenant)
    typer.echo(f"escalation of run {run} resolved as {resolution} by {by} (unsigned: a "
               "worker with --signed-resolutions refuses it)")


@app.command("resume")
@handle_errors
def resume(
    ctx: typer.Context,
    run: RunArg,
    by: ByOption,
    step: Annotated[
        str | None,
        typer.Option("--step", help="Resume at this step instead of where the run stopped.",
                     show_default=False),
    ] = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Resume a dead run, unsigned: failed calls are tried again — each through the whole
    guard (policy, budgets, a fresh approval where one is required) — completed ones are
    not. Where runs settle only with signed resolutions ([approvals] signed_resolutions in
    the deployment's config: --config, else ./underway.toml) this is refused and nothing
    is sent; use ``underway approvals resolve RUN --outcome resume`` there."""
    with open_client(ctx, db, config_file) as client:
        run = find_run(client, tenant, run).run_id
        client.resume(run, by=by, step=step, tenant_id=tenant)
    where = f"at step {step}" if step else "where it stopped"
    typer.echo(f"run {run} resumed {where} by {by} (unsigned: a worker with "
               "--signed-resolutions refuses it; sign one with `underway approvals resolve "
               "RUN --outcome resume`)")


@app.command("fork")
@handle_errors
def fork(
    ctx: typer.Context,
    run: RunArg,
    at: Annotated[
        int, typer.Option("--at", help="The seq of the run's event whose state the fork "
                          "starts from (`underway runs events RUN` shows them).",
                          show_default=False),
    ],
    by: ByOption,
    reason: Annotated[str, typer.Option("--reason", help="Why (journaled in both runs).")]
    = "",
    step: Annotated[
        str | None,
        typer.Option("--step", help="Start the fork at this step (default: the step the run "
                     "stood at after that event, run from its start).", show_default=False),
    ] = None,
    state_patch: Annotated[
        str | None,
        typer.Option("--state-patch", help="Change the state first: a JSON object (a merge "
                     "patch) or a JSON Patch list of operations.", show_default=False),
    ] = None,
    app_spec: Annotated[
        str | None,
        typer.Option("--app", help="The flows, as module:attribute: check the step and the "
                     "patched state against the flow now.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fork as JSON.")] = False,
    tenant: TenantOption = "default",
    purpose: PurposeOption = DEFAULT_PURPOSE,
    db: DbOption = None,
) -> None:
    """Start a new run from a run's state at one of its events, for recovery or a what-if.

    The fork gets a new id and starts ready at the step (its calls made anew, under keys of
    its own); it keeps the run's input, principal, subject and usage counters, and never
    inherits approvals, pending requests, waits or escalations: a forked call that needs
    an approval asks for its own. Both journals record the link (RunForked in the run,
    the origin in the fork's first event). The read of the run's state is written to the
    access log."""
    patch = parse_json(state_patch, "--state-patch")
    flows: list[Flow[Any, Any]] = []
    if app_spec is not None:
        flows = app_code(app_spec)[0]
    with open_client(ctx, db) as client:
        if flows:
            client = Client(client.store, flows=flows)
        run = find_run(client, tenant, run).run_id
        record_read(client.store, "runs fork", tenant, [run], purpose=purpose, by=by)
        made = client.fork(run, at_seq=at, by=by, reason=reason, step=step,
                           state_patch=patch, tenant_id=tenant)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(made)))
        return
    typer.echo(f"forked run {made.parent_run_id} at seq {made.seq} (it stood at step "
               f"{made.parent_step or '-'}, {made.parent_status}) into run {made.run_id}, "
               f"starting at step {made.step}")
    if made.redone:
        typer.echo(f"note: the fork runs step {made.step} from its start and makes again, "
                   f"under its own keys, the calls the run had made in it: "
                   f"{', '.join(made.redone)}")
    for note in made.notes:
        typer.echo(f"note: {note}")
