"""The ``underway`` command line: a thin layer over the client (and, for ``underway
worker``, the executor).

``underway db migrate``, ``underway runs start|ls|show|events|signal|cancel|resolve|resume``,
``underway audit verify|anchor|keygen``, ``underway worker``, ``underway queues set|ls|rm``,
``underway schedules ls|add|rm``, ``underway events send``, ``underway keys new``,
``underway approvers add|ls|revoke``,
``underway approvals ls|show|approve|reject|answer|resolve``,
``underway policy check|explain``, ``underway knowledge purge|rm`` and
``underway usage``; ``underway serve`` (the HTTP API), ``underway apikeys
new|ls|revoke|access-log`` and ``underway webhooks set|ls|rm``. The database comes from
``--db URL`` (before or after the command) or ``$UNDERWAY_DB``. A RUN argument takes a
run's id or a prefix of exactly one run's id.
Errors print one line and exit with status 2; a failed audit exits with status 1.

Only this package imports typer and rich, so ``import underway`` stays light.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

# Typer carries its own copy of click; its command group is what a lazy command plugs into.
from typer._click.core import Command, Context
from typer._click.exceptions import UsageError
from typer.core import TyperGroup

from . import (
    apikeys,
    approvals,
    audit,
    db,
    events,
    keys,
    knowledge,
    policy,
    queues,
    runs,
    schedules,
    usage,
    worker,
)
from ._common import DbOption

__all__ = ["LAZY", "app", "main"]

LAZY = {"serve": "underway.cli.serve"}
"""Commands whose module is imported only when the command is run or listed: ``serve``
needs FastAPI and uvicorn (the ``service`` extra), which every other command can do
without, and which would double the CLI's start-up time."""


class _Commands(TyperGroup):
    """The root command group, with the :data:`LAZY` commands loaded on demand."""

    def list_commands(self, ctx: Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in LAZY:
            return super().get_command(ctx, cmd_name)
        try:
            module = importlib.import_module(LAZY[cmd_name])
        except ModuleNotFoundError as exc:
            if exc.name not in ("fastapi", "uvicorn", "starlette"):
                raise
            raise UsageError(
                f"`underway {cmd_name}` needs the service extra ({exc.name} is missing): "
                "pip install 'underway[service]'") from None
        return typer.main.get_command(module.app)


app = typer.Typer(
    cls=_Commands,
    name="underway",
    help="Inspect, steer and audit underway runs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(db.app, name="db")
app.add_typer(runs.app, name="runs")
app.add_typer(audit.app, name="audit")
app.add_typer(schedules.app, name="schedules")
app.add_typer(events.app, name="events")
app.add_typer(queues.app, name="queues")
app.command("worker")(worker.worker)

# signed approvals: keys, the approvers registry, deciding requests
app.add_typer(keys.app, name="keys")
app.add_typer(approvals.approvers, name="approvers")
app.add_typer(approvals.app, name="approvals")

# policy files: validate one, explain the decision for a call
app.add_typer(policy.app, name="policy")

# spending: tokens, cost, calls, messages, money per tenant
app.command("usage")(usage.usage)

# long-term memory: purge expired records, erase one
app.add_typer(knowledge.app, name="knowledge")

# underway serve: API keys, the access log, webhook secrets (`serve` itself is in LAZY)
app.add_typer(apikeys.app, name="apikeys")
app.add_typer(apikeys.webhooks, name="webhooks")


def _print_version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"underway {version('underway')}")
        except PackageNotFoundError:
            typer.echo("underway (version unknown: not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    database: DbOption = None,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    ctx.obj = database


def main() -> None:
    """Entry point of the ``underway`` script."""
    # The connection pool logs each failed attempt; the command reports failure itself.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    app()
