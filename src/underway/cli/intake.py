"""``underway intake nats|rabbitmq|maildir``: take outside events in from a queue or a
maildir until stopped by SIGTERM or SIGINT (docs/intake.md)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from ..client import Client
from ..errors import MissingExtra
from ..scheduling import intake_sources
from ..scheduling.intake import Routes
from ..scheduling.intake_sources import IntakeCounts, MailOptions
from ._common import DbOption, Problem, handle_errors, open_store
from .events import AppOption, intake_client, load_routes

app = typer.Typer(help="Take outside events in from queues and mail.", no_args_is_help=True)

RoutesOption = Annotated[str, typer.Option(
    "--routes", help="The routing table, as module:attribute (the current directory is on "
    "the import path).", show_default=False)]
TenantOption = Annotated[str, typer.Option(
    "--tenant", help="The tenant every event taken in belongs to.")]
SourceOption = Annotated[str | None, typer.Option(
    "--source", help="The events' source (default: nats:STREAM, rabbitmq:QUEUE or mail).",
    show_default=False)]
VerboseOption = Annotated[bool, typer.Option(
    "--verbose", "-v", help="Log every message taken in (dead letters and store failures "
    "are always logged).")]


def _logging(command: str, verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
        format=f"%(asctime)s underway intake {command} %(process)d %(levelname)s %(message)s",
    )


def _extra(name: str, extra: str) -> Any:
    """``underway.intake_sources.<name>``, or a clear error when its extra is missing."""
    try:
        return getattr(intake_sources, name)
    except MissingExtra as exc:
        raise exc.about(f"`underway intake {extra}`") from None


@contextmanager
def _client(ctx: typer.Context, db: str | None, routes: str,
            app_spec: str | None) -> Iterator[tuple[Client, Routes]]:
    table = load_routes(routes)
    with open_store(ctx, db) as store:
        yield intake_client(store, table, app_spec), table


def _until_signalled(run: Callable[[asyncio.Event, asyncio.Event],
                                   Coroutine[Any, Any, IntakeCounts]],
                     command: str) -> IntakeCounts:
    """Run a consumer until SIGTERM or SIGINT; say when it is ready."""

    async def main() -> IntakeCounts:
        stop, ready = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.ensure_future(run(stop, ready))
        waiting = asyncio.ensure_future(ready.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            typer.echo(f"underway intake {command} ready", err=True)
        waiting.cancel()
        return await task

    return asyncio.run(main())


def _summary(command: str, counts: IntakeCounts) -> None:
    typer.echo(f"underway intake {command} stopped: {counts.acted} acted on "
               f"({counts.duplicates} duplicates), {counts.dead} dead-lettered, "
               f"{counts.retried} handed back")


@app.command("nats")
@handle_errors
def nats(
    ctx: typer.Context,
    stream: Annotated[str, typer.Option("--stream", help="The JetStream stream to read.",
                                        show_default=False)],
    subject: Annotated[str, typer.Option("--subject", help="The subject (wildcards allowed) "
                                         "of the stream to read.", show_default=False)],
    routes: RoutesOption,
    server: Annotated[str, typer.Option("--server", help="The NATS server's URL.")]
    = "nats://127.0.0.1:4222",
    durable: Annotated[str, typer.Option("--durable", help="The durable consumer's name "
                                         "(created when missing; its position survives "
                                         "restarts).")] = "underway-intake",
    dead_letter: Annotated[str | None, typer.Option(
        "--dead-letter", help="The subject malformed messages are published to (a stream "
        "must capture it). Without it they are terminated and logged.",
        show_default=False)] = None,
    ack_wait: Annotated[float, typer.Option(
        "--ack-wait", min=0.1, help="Seconds before a message taken and not acknowledged "
        "(its consumer died) is delivered again; used when the durable is created.")] = 30.0,
    app_spec: AppOption = None,
    tenant: TenantOption = "default",
    source: SourceOption = None,
    verbose: VerboseOption = False,
    db: DbOption = None,
) -> None:
    """Consume a JetStream subject; each message is acked after its intake commits."""
    _logging("nats", verbose)
    nats_intake = _extra("NatsIntake", "nats")
    with _client(ctx, db, routes, app_spec) as (client, table):
        consumer = nats_intake(client, table, stream=stream, subject=subject, servers=server,
                               durable=durable, dead_letter=dead_letter, tenant_id=tenant,
                               source=source, ack_wait=ack_wait)
        counts = _until_signalled(lambda stop, ready: consumer.run(stop, ready=ready), "nats")
    _summary("nats", counts)


@app.command("rabbitmq")
@handle_errors
def rabbitmq(
    ctx: typer.Context,
    queue: Annotated[str, typer.Option("--queue", help="The queue to read (it must exist).",
                                       show_default=False)],
    routes: RoutesOption,
    url: Annotated[str, typer.Option("--url", help="The broker's AMQP URL.")]
    = "amqp://guest:guest@127.0.0.1:5672/",
    dead_letter: Annotated[str | None, typer.Option(
        "--dead-letter", help="The queue malformed messages are published to (declared "
        "durable when missing). Without it they are rejected, to the queue's own "
        "dead-letter exchange if it has one.", show_default=False)] = None,
    key_header: Annotated[str, typer.Option(
        "--key-header", help="The header read for the idempotency key when a message has "
        "no message_id.")] = "Idempotency-Key",
    app_spec: AppOption = None,
    tenant: TenantOption = "default",
    source: SourceOption = None,
    verbose: VerboseOption = False,
    db: DbOption = None,
) -> None:
    """Consume a RabbitMQ queue; each message is acked after its intake commits."""
    _logging("rabbitmq", verbose)
    rabbitmq_intake = _extra("RabbitMQIntake", "rabbitmq")
    with _client(ctx, db, routes, app_spec) as (client, table):
        consumer = rabbitmq_intake(client, table, queue=queue, url=url,
                                   dead_letter=dead_letter, key_header=key_header,
                                   tenant_id=tenant, source=source)
        counts = _until_signalled(lambda stop, ready: consumer.run(stop, ready=ready),
                                  "rabbitmq")
    _summary("rabbitmq", counts)


@app.command("maildir")
@handle_errors
def maildir(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="The maildir (with new, cur and tmp).",
                                              show_default=False)],
    routes: RoutesOption,
    event_type: Annotated[str, typer.Option("--event-type", help="Every mail's event type "
                                            "(routes match on it).")] = "mail.received",
    entity: Annotated[str, typer.Option(
        "--entity", help="What a mail is about: thread (its conversation: replies reach "
        "the run the first mail started) or sender (its From address).")] = "thread",
    attachments: Annotated[str, typer.Option(
        "--attachments", help="include (in base64, up to --max-attachment bytes each; "
        "larger ones are left out with a note) or skip (each noted, none taken in).")]
    = "include",
    max_attachment: Annotated[int, typer.Option(
        "--max-attachment", min=0, help="Bytes of one attachment taken in.")] = 1024 * 1024,
    interval: Annotated[float, typer.Option(
        "--interval", min=0.01, help="Seconds between looks at new/.")] = 1.0,
    once: Annotated[bool, typer.Option(
        "--once", help="Take in what new/ holds now, then exit (status 1 when a store "
        "failure left mails in new/).")] = False,
    app_spec: AppOption = None,
    tenant: TenantOption = "default",
    source: Annotated[str, typer.Option("--source", help="The events' source.")] = "mail",
    verbose: VerboseOption = False,
    db: DbOption = None,
) -> None:
    """Watch a maildir; each new mail is filed in cur/ after its intake commits."""
    _logging("maildir", verbose)
    if entity not in ("thread", "sender"):
        raise Problem(f"--entity must be thread or sender, not {entity!r}")
    if attachments not in ("include", "skip"):
        raise Problem(f"--attachments must be include or skip, not {attachments!r}")
    options = MailOptions(
        tenant_id=tenant, source=source, event_type=event_type,
        entity="thread" if entity == "thread" else "sender",
        attachments=_attachments(attachments), max_attachment=max_attachment)
    with _client(ctx, db, routes, app_spec) as (client, table):
        watcher = intake_sources.MaildirIntake(client, table, directory, options)
        if once:
            watcher.process_new()
            if watcher.counts.retried:
                # Mails were left in new/ for a store failure: say so to cron.
                _summary("maildir", watcher.counts)
                raise typer.Exit(1)
        else:
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            typer.echo("underway intake maildir ready", err=True)
            watcher.watch(stop, interval=interval)
    _summary("maildir", watcher.counts)


def _attachments(value: str) -> Literal["include", "skip"]:
    return "skip" if value == "skip" else "include"
