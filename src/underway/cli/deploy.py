"""``underway deploy check``: before a deploy, every unfinished run of the database against
the new code (see :mod:`underway.ops.deploy` and docs/versioning.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from collections import Counter
from typing import Annotated

import typer

from ..crypto import Envelope, rotation_flow
from ..ops.deploy import Breakage, StoppedRun, check_deploy
from ._common import (
    ConfigOption,
    DbOption,
    KeyringOption,
    Problem,
    app_code,
    handle_check_errors,
    open_store,
    read_config,
)

app = typer.Typer(help="Check parked runs against new code before a deploy.",
                  no_args_is_help=True)

BROKEN = 1
"""Exit status when a run would break."""


@app.command("check")
@handle_check_errors
def check(
    ctx: typer.Context,
    app_spec: Annotated[
        str | None,
        typer.Option("--app", help="The new code, as module:attribute (as for `underway "
                     "worker`). Default: worker.app of the config file.", show_default=False),
    ] = None,
    tenant: Annotated[
        list[str] | None,
        typer.Option("--tenant", help="Check this tenant's runs (repeat for several; "
                     "default: every tenant).", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
    = False,
    keyring: KeyringOption = None,
    config_file: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Check every unfinished run (ready, waiting, escalated, dead) against the new code:
    its flow and current step exist (an alias counts), its input and state fit the new
    models (after their upcasters), and a run parked mid-step makes the same calls when
    its step runs again against its journal. Nothing is written; no tool or model is
    called (the steps' own code runs).

    Runs that had stopped already (dead or escalated) are judged apart, each with a
    verdict: "resumes" (the new code continues it once resumed or resolved; a dead run's
    failed calls run again) or "stops again" (the new code stops it for the reason it
    stopped). Neither counts as breaking: a run that died of a failing supplier is no
    fault of the deploy.

    Exit status 1 with a table of the runs that would break and why; 0 when none would
    (so unchanged code always passes, and the command can gate a CI pipeline).
    """
    config = read_config(config_file, "deploy check")
    spec = app_spec or config.worker.app
    if spec is None:
        raise Problem("no app given: pass --app module:attribute (the new code) or set "
                      "worker.app in the config file")
    # The worker's own reading of the file: a policy file or secrets binding the worker
    # would refuse to start with fails the check too.
    config.make_guard_options(notify=False)
    flows, tools = app_code(spec, config)
    began = time.perf_counter()
    with open_store(ctx, db, config=config, keyring=keyring, need_keys=True) as store:
        if isinstance(store.codec.sealer, Envelope):
            flows = [*flows, rotation_flow(store)]  # what a worker on it registers too
        report = asyncio.run(check_deploy(store, flows, tools, tenants=tenant))
    took = time.perf_counter() - began
    if as_json:
        typer.echo(json.dumps({
            "checked": report.checked, "rerun": report.rerun, "ok": report.ok,
            "seconds": round(took, 3), "old_paths": dict(report.old_paths),
            "broken": [dataclasses.asdict(b) for b in report.broken],
            "stopped": [dataclasses.asdict(r) for r in report.stopped],
        }, indent=2))
    else:
        _print(report.broken, wide=not sys.stdout.isatty())
        _print_stopped(report.stopped, wide=not sys.stdout.isatty())
        paths = "".join(f"\n  {n} unfinished run{'s' if n != 1 else ''} on the old path of "
                        f"ctx.version({c!r}): keep that branch"
                        for c, n in sorted(report.old_paths.items()))
        verdict = (f"{len(report.broken)} would break" if report.broken
                   else "none would break")
        runs = "run" if report.checked == 1 else "runs"
        verdicts = Counter(r.verdict for r in report.stopped)
        stopped = "".join(f"\n  {n} stopped already (dead or escalated) and {v}"
                          for v, n in sorted(verdicts.items()))
        typer.echo(f"checked {report.checked} unfinished {runs} in {took:.1f}s "
                   f"({report.rerun} parked mid-step, their steps run again against their "
                   f"journals): {verdict}{stopped}{paths}")
    if not report.ok:
        raise typer.Exit(BROKEN)


def _print_stopped(stopped: list[StoppedRun], *, wide: bool) -> None:
    """The runs that had stopped before the deploy, apart, each with its verdict."""
    if not stopped:
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("RUN", "TENANT", "FLOW", "STEP", "STATUS", "VERDICT", "WHY"):
        table.add_column(header, no_wrap=header != "WHY", overflow="fold")
    for r in stopped:
        table.add_row(r.run_id if wide else r.run_id[:8], r.tenant_id, r.flow, r.step or "-",
                      r.status, r.verdict, Text(r.why))
    Console(width=10_000 if wide else None, highlight=False).print(table)


def _print(broken: list[Breakage], *, wide: bool) -> None:
    if not broken:
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False)
    for header in ("RUN", "TENANT", "FLOW", "STEP", "STATUS", "PROBLEM", "WHY"):
        table.add_column(header, no_wrap=header != "WHY", overflow="fold")
    for b in broken:
        table.add_row(b.run_id if wide else b.run_id[:8], b.tenant_id, b.flow, b.step or "-",
                      b.status, b.kind, b.problem)
    Console(width=10_000 if wide else None, highlight=False).print(table)
