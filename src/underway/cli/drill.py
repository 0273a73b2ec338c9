"""``underway drill``: run a flow against injected faults in a scratch database and report
what it did (docs/drills.md)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..ops.drills import DrillOptions, DrillReport, parse_faults, run_drill
from ._common import DbOption, Problem, database_url, handle_check_errors

app = typer.Typer(add_completion=False)


@app.command("drill")
@handle_check_errors
def drill(
    ctx: typer.Context,
    app_spec: Annotated[str, typer.Option(
        "--app", help="The flows and tools, as for `underway worker --app` (module:attribute; "
        "the current directory is on the import path).", show_default=False)],
    only: Annotated[str | None, typer.Option(
        "--only", help="The faults to inject, comma separated: crash, duplicates, "
        "credentials, partial, slow (default: all).", show_default=False)] = None,
    runs: Annotated[int, typer.Option("--runs", min=1, help="Runs to start, shared out "
                                      "among the faults in turn.")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seeds every choice: kill points, "
                                      "which calls get a fault, how an answer breaks.")] = 0,
    setup: Annotated[str | None, typer.Option(
        "--setup", help="module:attribute of a function of the drill's site (scratch "
        "directory and database) returning a Scenario, or a context manager yielding one: "
        "the world the app needs and the input of each run.", show_default=False)] = None,
    flow: Annotated[str | None, typer.Option(
        "--flow", help="The flow to start (default: the app's first).",
        show_default=False)] = None,
    input_json: Annotated[str | None, typer.Option(
        "--input", help="The input of every run, as JSON (without --setup).",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    patience: Annotated[float, typer.Option(
        "--patience", min=1, help="Seconds to wait for the runs to settle.")] = 300.0,
    environment: Annotated[str | None, typer.Option(
        "--environment", help="The workers' environment (default dev).",
        show_default=False)] = None,
    secrets_prefix: Annotated[str | None, typer.Option(
        "--secrets-env-prefix", help="Tools' secrets come from environment variables with "
        "this prefix (default: made-up values).", show_default=False)] = None,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the scratch database and directory, and say where.")] = False,
    db: DbOption = None,
) -> None:
    """Run the app's flow in a scratch database (a fresh PostgreSQL schema, dropped after;
    or a temporary SQLite file) against injected faults, with real worker processes, and
    print what happened. Exits 1 when the drill finds an effect executed twice, a
    duplicate run, or a failure nobody was told of; 2 when it could not run."""
    try:
        given = None if input_json is None else json.loads(input_json)
    except ValueError as exc:
        raise Problem(f"--input is not JSON: {exc}") from None
    if setup is not None and input_json is not None:
        raise Problem("give --setup or --input, not both (the scenario gives the input)")
    opts = DrillOptions(
        app=app_spec, db=database_url(ctx, db), only=parse_faults(only), runs=runs,
        seed=seed, setup=setup, input=given, flow=flow, patience=patience,
        environment=environment, secrets_env_prefix=secrets_prefix, keep=keep,
    )
    err = Console(stderr=True)
    report = run_drill(opts, say=lambda text: err.print(f"[dim]drill: {text}[/dim]"))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        # A report written to a file or a pipe is as wide as on a terminal.
        show(report, Console(width=None if sys.stdout.isatty() else 110))
    if not report.ok:
        raise typer.Exit(1)


def show(report: DrillReport, console: Console) -> None:
    """Print ``report``: a row per fault, the totals, what the flow did about each fault,
    then each finding."""
    table = Table(title=f"underway drill (seed {report.seed}, {report.database})",
                  title_justify="left")
    for name in ("fault", "runs", "injected", "completed", "escalated", "failed",
                 "waiting", "duplicates", "silent"):
        table.add_column(name, justify="left" if name == "fault" else "right")
    for f in report.faults:
        table.add_row(
            f.fault, str(f.runs), str(f.injected), str(f.verdicts["completed"]),
            str(f.verdicts["escalated"]), str(f.verdicts["failed"]),
            str(f.verdicts["waiting"] + f.verdicts["unfinished"]),
            _flag(f.duplicates), _flag(f.silent))
    console.print(table)
    console.print(
        f"runs started {report.started}, completed {report.total('completed')}, escalated "
        f"{report.total('escalated')}, failed {report.total('failed')}; duplicates "
        f"{report.duplicates}, silent failures {report.silent}; workers killed "
        f"{report.kills}", highlight=False)
    console.print("what the flow did:")
    for f in report.faults:
        did = "; ".join(f"{what} x{n}" for what, n in f.reactions.most_common()) or "-"
        console.print(f"  {f.fault}: {did}", highlight=False)
    for finding in report.findings:
        console.print(f"[red]{finding.kind.upper()}[/red] ({finding.fault}) run "
                      f"{finding.run_id}: {finding.detail}", highlight=False)
    if report.scratch:
        console.print(f"scratch kept: {report.scratch}", highlight=False)
    console.print("[green]OK[/green]: no duplicate, no silent failure" if report.ok
                  else "[red]FAILED[/red]: the drill found the problems above")
    sys.stdout.flush()


def _flag(n: int) -> str:
    return f"[red]{n}[/red]" if n else "0"
