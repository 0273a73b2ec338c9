"""The ``underway`` command line: a thin layer over the client (and, for ``underway
worker``, the executor).

``underway db migrate``, ``underway runs start|ls|show|events|signal|cancel|resolve|resume|fork``,
``underway replay`` (a historical run against new code, model or policy, without side
effects), ``underway deploy check`` (parked runs against new code),
``underway audit verify|anchor|keygen``, ``underway worker``, ``underway queues set|ls|rm``,
``underway schedules ls|add|rm``, ``underway events send``,
``underway intake nats|rabbitmq|maildir``,
``underway keys new|init|kek|ls|rotate``,
``underway approvers add|ls|revoke``,
``underway approvals ls|show|approve|reject|answer|resolve``,
``underway policy check|explain``, ``underway knowledge purge|rm|reindex``,
``underway consent grant|withdraw|show``, ``underway retention sweep|log``,
``underway hold add|rm|ls``, ``underway erase subject|log``, ``underway drill`` (fault
drills in a scratch database), ``underway usage``,
``underway eval`` and ``underway drift`` (measuring agents from their journals) and
``underway access-log`` (who read which run's data, and why; ``--verify`` its hash
chain); ``underway serve`` (the HTTP API), ``underway apikeys new|ls|revoke|access-log``
and ``underway webhooks set|ls|rm``. The database comes from ``--db URL`` (before or
after the command) or ``$UNDERWAY_DB``; the keys of an encrypted database from
``--keyring FILE`` (before the command), ``$UNDERWAY_KEYRING`` or ``$UNDERWAY_KEK``. A RUN
argument takes a run's id or a prefix of
exactly one run's id.
Errors print one line. A usage error exits with status 2, a runtime failure with 1;
a command that reports findings (``audit verify``...) exits 1 for a finding and 2 for
any error.

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
from typer._click.formatting import HelpFormatter
from typer.core import TyperCommand, TyperGroup

from ..errors import MissingExtra
from ._common import DbOption, KeyringOption, RootOptions
from ._help import plain, plain_help

__all__ = ["LAZY", "SUMMARY", "app", "main"]

LAZY: dict[str, str] = {
    # command groups: a Typer of subcommands
    "apikeys": "apikeys:app",  # underway serve: API keys and the access log
    "approvals": "approvals:app",  # signed approvals: deciding requests
    "approvers": "approvals:approvers",  # ... the approvers registry
    "audit": "audit:app",
    "consent": "consent:app",  # data subjects' consent per purpose: grant, withdraw, show
    "db": "db:app",
    "deploy": "deploy:app",  # before a deploy: parked runs checked against the new code
    "erase": "erase:app",  # erasing data subjects by crypto-shredding; the erasure log
    "events": "events:app",
    "hold": "retention:holds",  # legal holds, which stop every purge
    "intake": "intake:app",  # outside events from NATS JetStream, RabbitMQ, a maildir
    "keys": "keys:app",  # ... approvers' keys; encryption keys: keyring, rotation
    "knowledge": "knowledge:app",  # long-term memory: purge, erase one, reindex
    "policy": "policy:app",  # policy files: validate one, explain the decision for a call
    "queues": "queues:app",
    "retention": "retention:app",  # purging finished runs past their period, the sweep log
    "runs": "runs:app",
    "schedules": "schedules:app",
    "webhooks": "apikeys:webhooks",  # underway serve: webhook secrets
    # single commands: a Typer of one command
    "access-log": "access:app",  # reads of run data: who, when, why; --verify its chain
    "activity": "activity:app",  # per day or hour; approvals and takeovers per role
    "drift": "evaluation:drift_app",  # recent behaviour against a baseline, from journals
    "drill": "drill:app",  # fault drills: a flow against crashes, duplicates, bad answers
    "eval": "evaluation:eval_app",  # completion, takeover, safety, cost... from journals
    "replay": "replay:app",  # a historical run against new code, model or policy
    "serve": "serve:app",
    "usage": "usage:app",  # spending: tokens, cost, calls, messages, money per tenant
    "worker": "worker:app",
}
"""Every command, as ``module:attribute`` of this package: a command's module is imported
only when the command is run or listed (``underway --help``), so a command loads what it
needs and nothing else. ``serve`` needs FastAPI and uvicorn (the ``service`` extra) and
starts in well under a second because no other command's module comes with it; ``worker``
alone loads the executor."""

SUMMARY: dict[str, str] = {
    "access-log": "Who read which run's data, when, where and why; --verify its hash chain.",
    "activity": "What a tenant's runs did per day or per hour",
    "apikeys": "Issue, list and revoke API keys; read the access log.",
    "approvals": "Review and decide requests that wait for a person.",
    "approvers": "Register and revoke the people who sign decisions.",
    "audit": "Audit the journal.",
    "consent": "Record and show data subjects' consent per purpose.",
    "db": "Manage the database schema.",
    "deploy": "Check parked runs against new code before a deploy.",
    "drift": "Whether the agents behave now as before: a recent window against a baseline, "
             "from their journals",
    "drill": "Run the app's flow in a scratch database",
    "erase": "Erase data subjects (crypto-shredding); the erasure log.",
    "eval": "How well the tenant's agents did, from their journals",
    "events": "Deliver outside events to runs.",
    "hold": "Place, lift and list legal holds",
    "intake": "Take outside events in from queues and mail.",
    "keys": "Approvers' signing keys; the keys of encryption at rest.",
    "knowledge": "Erase long-term knowledge (what has expired, or one record on request)",
    "policy": "Validate policy files and explain their decisions.",
    "queues": "Set, list and remove queue limits.",
    "replay": "Execute a historical run again against new code (--app), a new model "
              "(--model) or a new policy (--policy), without side effects",
    "retention": "Purge finished runs past their retention period; read the sweep log.",
    "runs": "List, inspect and steer runs.",
    "schedules": "List, add and remove cron schedules.",
    "serve": "Serve the HTTP API: runs, approvals, webhooks, admin.",
    "usage": "Tokens, model cost, model and tool calls, messages and money moved by a "
             "tenant's runs since a time",
    "webhooks": "Set, list and remove the secrets intake webhooks are signed with.",
    "worker": "Lease ready runs and drive them until SIGTERM or SIGINT (then stop "
              "gracefully).",
}
"""What ``underway --help`` lists for each :data:`LAZY` command, so that listing them
imports none: each is how its command's own help begins (a test holds them to it)."""

_SINGLE = frozenset({"access-log", "activity", "drift", "drill", "eval", "replay", "serve",
                     "usage", "worker"})
"""The :data:`LAZY` entries that are one command rather than a group of them."""


class _Commands(TyperGroup):
    """The root command group, with the :data:`LAZY` commands loaded on demand. Its help
    lists them from :data:`SUMMARY`, loading none."""

    _listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in LAZY:
            found = super().get_command(ctx, cmd_name)
            return None if found is None else plain_help(found)
        if self._listing:
            return TyperCommand(cmd_name, help=plain(SUMMARY[cmd_name]),
                                short_help=plain(SUMMARY[cmd_name]))
        module_name, _, attribute = LAZY[cmd_name].partition(":")
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except MissingExtra as exc:
            raise UsageError(str(exc.about(f"`underway {cmd_name}`"))) from None
        sub: typer.Typer = getattr(module, attribute)
        command = typer.main.get_command(sub) if cmd_name in _SINGLE \
            else typer.main.get_group(sub)
        command.name = cmd_name
        return plain_help(command)


app = typer.Typer(
    cls=_Commands,
    name="underway",
    help="Inspect, steer and audit underway runs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


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
    keyring: KeyringOption = None,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    ctx.obj = RootOptions(database, keyring)


def main() -> None:
    """Entry point of the ``underway`` script."""
    # The connection pool logs each failed attempt; the command reports failure itself.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    app()
