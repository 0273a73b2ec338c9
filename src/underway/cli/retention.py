"""``underway retention sweep|log``: purge finished runs past their retention period, forget
purged runs past their ``forget_after``, and read the sweep and forget logs;
``underway hold add|rm|ls``: legal holds, which stop every purge (and forget) of a run or
of every run about a data subject."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Annotated

import typer

from ..client import Client
from ..events import is_tombstone
from ..ops.timeline import format_time
from ..privacy.retention import SweepReport, TenantSweep, sweep
from ..store.base import HoldRecord, Store
from ._common import (
    ConfigOption,
    DbOption,
    Problem,
    TenantOption,
    find_run,
    handle_errors,
    open_store,
    read_config,
)

app = typer.Typer(help="Purge finished runs past their retention period; read the sweep "
                  "log.", no_args_is_help=True)
holds = typer.Typer(help="Place, lift and list legal holds: a held run, or any run about a "
                    "held data subject, is never purged.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ByOption = Annotated[str, typer.Option("--by", help="Who is acting (recorded).",
                                       show_default=False)]
RunOption = Annotated[str | None, typer.Option(
    "--run", help="The run (its id or a prefix of exactly one run's id).", show_default=False)]
SubjectOption = Annotated[str | None, typer.Option(
    "--subject", help="The data subject: every run about them, now and later.",
    show_default=False)]
_VERB = {"purged": "purged", "held": "held", "skipped": "skipped", "forgotten": "forgotten"}


@app.command("sweep")
@handle_errors
def sweep_command(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Change nothing: print what "
                                          "would be purged.")] = False,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant (default: "
                                               "every tenant).", show_default=False)] = None,
    by: Annotated[str, typer.Option("--by", help="Who sweeps (written to the sweep log).")]
    = "underway retention sweep",
    as_json: JsonFlag = False,
    config_file: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Purge every finished run past its retention period (the config file's retention
    table), except what legal holds hold; delete the blobs nothing refers to any more.

    Each run's events keep their skeleton (type, seq, time and the fields listed in
    docs/data-protection.md) and their place in the hash chain, so `underway audit verify`
    still passes; their payloads, the run's checkpoints, signals and error text are gone.
    Each run is purged in one transaction: a sweep stopped at any point is finished by the
    next one. Without retention rules nothing is purged.

    Purged runs past their forget_after period are then forgotten: their skeleton
    deleted, their last head written to the forget log (`underway retention log
    --forgotten`), so `underway audit verify --anchors` tells them from lost runs.
    """
    config = read_config(config_file, "retention sweep")
    retention = config.make_retention()
    if retention is None or retention.empty:
        where = config.source or "no config file (pass --config FILE)"
        typer.echo(f"no retention rules in {where}: nothing is purged (no rule means no "
                   "purge)")
        return
    with open_store(ctx, db, config=config) as store:
        report = sweep(store, retention, tenant_id=tenant, dry_run=dry_run, by=by)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(report), indent=2))
        return
    _print_report(report)


def _print_report(report: SweepReport) -> None:
    would = "would purge" if report.dry_run else "purged"
    if not report.tenants:
        typer.echo("no runs to sweep")
    for t in report.tenants:
        typer.echo(_tenant_line(t, would, report.dry_run))
        for o in t.outcomes:
            verb = "would purge" if report.dry_run and o.action == "purged" \
                else _VERB[o.action]
            what = f"{o.flow}, {o.status} {format_time(o.ended_at)}"
            why = f"by {o.rule}" if o.action == "purged" else o.reason
            count = f", {o.events} events" if o.events else ""
            typer.echo(f"  {verb:<11} {o.run_id}  ({what}{count}) {why}")
        for o in t.forgets:
            verb = "would forget" if report.dry_run and o.action == "forgotten" \
                else _VERB[o.action]
            why = f"by {o.rule}" if o.action == "forgotten" else o.reason
            typer.echo(f"  {verb:<12} {o.run_id}  ({o.flow}, {o.status} "
                       f"{format_time(o.ended_at)}, purged, head at seq {o.events}) {why}")
    if not report.dry_run:
        typer.echo(f"sweep {report.sweep_id} written to the sweep log (`underway retention "
                   "log`)")


def _tenant_line(t: TenantSweep, would: str, dry: bool) -> str:
    line = (f"tenant {t.tenant_id!r}: {would} {t.count('purged')} run"
            f"{'' if t.count('purged') == 1 else 's'}, {t.count('held')} held, "
            f"{t.count('skipped')} skipped")
    if t.forgets:
        line += (f"; {'would forget' if dry else 'forgot'} {t.forgotten} purged run"
                 f"{'' if t.forgotten == 1 else 's'}")
    if t.blobs_deleted is not None:
        line += f"; {t.blobs_deleted} unreferenced blobs deleted"
    elif t.collection_note:
        line += f"; blobs not collected: {t.collection_note}"
    elif dry:
        line += "; blobs are collected after a real sweep"
    return line


@app.command("log")
@handle_errors
def log(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's sweeps "
                                               "(needed with --runs).",
                                               show_default=False)] = None,
    runs: Annotated[bool, typer.Option("--runs", help="List the tenant's purged runs "
                                       "instead: when, by which sweep and rule.")] = False,
    forgotten: Annotated[bool, typer.Option("--forgotten", help="List the tenant's forget "
                                            "log instead: each forgotten run and the head "
                                            "its journal ended at.")] = False,
    sweep_id: Annotated[str | None, typer.Option("--sweep", help="With --runs or "
                                                 "--forgotten: only the runs this sweep "
                                                 "purged or forgot.", show_default=False)]
    = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 20,
    as_json: JsonFlag = False,
    db: DbOption = None,
) -> None:
    """The sweep log, newest first (with --runs, each purged run; with --forgotten, the
    forget log, oldest first).

    Each sweep of each tenant: who swept and when, how many runs it purged, held and
    skipped, how many blobs it deleted and how many purged runs it forgot."""
    if (runs or forgotten) and tenant is None:
        raise Problem("--runs and --forgotten list one tenant's runs: give --tenant")
    if runs and forgotten:
        raise Problem("give --runs or --forgotten, not both")
    if sweep_id is not None and not (runs or forgotten):
        raise Problem("--sweep goes with --runs or --forgotten")
    if forgotten:
        assert tenant is not None
        with open_store(ctx, db) as store:
            lines = store.forgotten_runs(tenant, sweep_id=sweep_id, limit=limit)
        if as_json:
            typer.echo(json.dumps([dataclasses.asdict(f) for f in lines], indent=2))
            return
        if not lines:
            typer.echo(f"no forgotten runs in tenant {tenant!r}")
        for f in lines:
            typer.echo(f"{f.seq:>6}  {format_time(f.forgotten_at)}  {f.run_id}  head at seq "
                       f"{f.last_seq} {f.head[:16]}  sweep {f.sweep_id}")
        return
    with open_store(ctx, db) as store:
        if runs:
            assert tenant is not None
            purged = store.purged_runs(tenant, sweep_id=sweep_id, limit=limit)
            sweeps = []
        else:
            sweeps = store.list_sweeps(tenant, limit=limit)
    if as_json:
        found = purged if runs else sweeps
        typer.echo(json.dumps([dataclasses.asdict(r) for r in found], indent=2))
        return
    if runs:
        if not purged:
            typer.echo(f"no purged runs in tenant {tenant!r}")
        for p in purged:
            typer.echo(f"{format_time(p.purged_at)}  {p.run_id}  {p.events} events  sweep "
                       f"{p.sweep_id}  {p.rule}")
        return
    if not sweeps:
        typer.echo("no sweeps recorded" + (f" in tenant {tenant!r}" if tenant else ""))
    for s in sweeps:
        if s.finished_at is None:
            state = "did not finish (stopped or killed; the next sweep goes on)"
        else:
            blobs = ("no blobs collected" if s.blobs_deleted is None
                     else f"{s.blobs_deleted} blobs deleted")
            state = f"{s.purged} purged, {s.held} held, {s.skipped} skipped, {blobs}"
            if s.forgotten:
                state += f", {s.forgotten} forgotten"
        typer.echo(f"{format_time(s.started_at)}  tenant {s.tenant_id!r}  sweep {s.sweep_id} "
                   f"by {s.by}: {state}")


# -- legal holds ----------------------------------------------------------------------------
def _target(store: Store, tenant: str, run: str | None, subject: str | None) -> tuple[str, str]:
    """(kind, target) from --run or --subject (exactly one); a run must exist."""
    if (run is None) == (subject is None):
        raise Problem("give --run RUN or --subject SUBJECT (one of them)")
    if subject is not None:
        if not subject.strip():
            raise Problem("--subject must not be empty")
        return "subject", subject
    assert run is not None
    return "run", find_run(Client(store), tenant, run).run_id


@holds.command("add")
@handle_errors
def add_hold(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option("--reason", help="Why (a case, a request; recorded).",
                                        show_default=False)],
    by: ByOption,
    run: RunOption = None,
    subject: SubjectOption = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Place a legal hold on a run, or on every run about a data subject: no retention
    sweep purges them until the hold is lifted (`underway hold rm`)."""
    if not reason.strip() or not by.strip():
        raise Problem("--reason and --by must not be empty: a hold says why and who")
    with open_store(ctx, db) as store:
        kind, target = _target(store, tenant, run, subject)
        placed = store.put_hold(HoldRecord(tenant, kind, target, reason, by, time.time()))
        standing = next(h for h in store.list_holds(tenant)
                        if (h.kind, h.target) == (kind, target))
        events = store.load_events(tenant, target) if kind == "run" else []
    what = f"{kind} {target} in tenant {tenant!r}"
    if not placed:
        typer.echo(f"{what} is already held (since {format_time(standing.created_at)} by "
                   f"{standing.by}: {standing.reason}); nothing changed")
        return
    typer.echo(f"legal hold placed on {what} by {by}: {reason}")
    if events and is_tombstone(events[0].payload):
        typer.echo(f"note: run {target} was purged before the hold; its payloads are gone",
                   err=True)


@holds.command("rm")
@handle_errors
def remove_hold(
    ctx: typer.Context,
    by: ByOption,
    run: RunOption = None,
    subject: SubjectOption = None,
    tenant: TenantOption = "default",
    db: DbOption = None,
) -> None:
    """Lift a legal hold (it stays on record: `underway hold ls --released`)."""
    with open_store(ctx, db) as store:
        if run is not None and subject is None:
            # A hold may outlive its run's row: a whole id is taken as it is.
            found = {h.target for h in store.list_holds(tenant) if h.kind == "run"}
            kind, target = ("run", run) if run in found else _target(store, tenant, run, None)
        else:
            kind, target = _target(store, tenant, run, subject)
        lifted = store.release_hold(tenant, kind, target, by=by, at=time.time())
    if not lifted:
        raise Problem(f"no standing hold on {kind} {target} in tenant {tenant!r}")
    typer.echo(f"legal hold on {kind} {target} in tenant {tenant!r} lifted by {by}")


@holds.command("ls")
@handle_errors
def list_holds(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's holds "
                                               "(default: every tenant).",
                                               show_default=False)] = None,
    released: Annotated[bool, typer.Option("--released", help="Lifted holds too.")] = False,
    as_json: JsonFlag = False,
    db: DbOption = None,
) -> None:
    """Standing legal holds (with --released, lifted ones too)."""
    with open_store(ctx, db) as store:
        found = store.list_holds(tenant, released=released)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(h) for h in found], indent=2))
        return
    if not found:
        typer.echo("no legal holds" + (f" in tenant {tenant!r}" if tenant else ""))
    for h in found:
        lifted = ("" if h.active else
                  f"  (lifted {format_time(h.released_at)} by {h.released_by})")
        typer.echo(f"{h.tenant_id}  {h.kind} {h.target}  since {format_time(h.created_at)} "
                   f"by {h.by}: {h.reason}{lifted}")
