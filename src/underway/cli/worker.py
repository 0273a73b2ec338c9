"""``underway worker``: lease and drive ready runs until stopped by SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import telemetry
from .._extras import import_extra
from ..config import Config, ConfigError, TelemetrySection
from ..crypto import Envelope, rotation_flow
from ..engine import Engine
from ..errors import ConfigurationError
from ..guard.approvals import load_private_key
from ..ops.audit import Anchoring, FileAnchorLog
from ..sandbox import WorkerLimits, configure_worker
from ..store import queries
from ..telemetry import Metrics
from ..worker import Worker
from ._common import (
    ConfigOption,
    DbOption,
    Failure,
    KeyringOption,
    Problem,
    app_code,
    handle_errors,
    open_store,
    override,
    read_config,
)

app = typer.Typer(add_completion=False)


@app.command("worker")
@handle_errors
def worker(
    ctx: typer.Context,
    app_spec: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="What the worker runs, as module:attribute: a Flow, a list of Flows and "
            "Tools, or a function of no arguments returning one. The current directory "
            "and the config file's are on the import path. Default: worker.app.",
            show_default=False,
        ),
    ] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", help="Serve this queue (repeat for several; default: "
                     "worker.queues, else every queue).", show_default=False),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Runs driven at once "
                                 "(default 10).", show_default=False)
    ] = None,
    lease_ttl: Annotated[
        float | None,
        typer.Option("--lease-ttl", min=0.1, help="Seconds a lease lasts unless renewed; "
                     "another worker takes a run over after this once its worker is gone "
                     "(default 30).", show_default=False),
    ] = None,
    poll: Annotated[
        float | None,
        typer.Option("--poll", min=0.01, help="Longest an idle worker waits before looking "
                     "for work again (default 1).", show_default=False),
    ] = None,
    grace: Annotated[
        float | None,
        typer.Option("--grace", min=0, help="On SIGTERM/SIGINT, seconds the steps in flight "
                     "may take to finish before they are cancelled and handed back "
                     "(default 30).", show_default=False),
    ] = None,
    no_eager_start: Annotated[
        bool,
        typer.Option("--no-eager-start", help="Leave every run this worker starts (a "
                     "schedule's tick, a step's child run) to a claim, instead of leasing it "
                     "in the start's own transaction while a slot is free."),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log each run handed back or given up.")
    ] = False,
    no_group_commit: Annotated[
        bool,
        typer.Option("--no-group-commit", help="Commit each run's steps in a transaction "
                     "of their own, not together with the other runs in flight "
                     "(worker.group_commit; on by default)."),
    ] = False,
    environment: Annotated[
        str | None,
        typer.Option("--environment", help="What policies see as the environment (dev, "
                     "staging, prod...; default dev); secrets bound by [secrets] to other "
                     "environments are refused.", show_default=False),
    ] = None,
    policy_file: Annotated[
        str | None,
        typer.Option("--policy", help="A policy file (TOML or YAML) for every flow that has "
                     "none of its own.", show_default=False),
    ] = None,
    secrets_prefix: Annotated[
        str | None,
        typer.Option("--secrets-env-prefix", help="Tools' secrets come from environment "
                     "variables with this prefix.", show_default=False),
    ] = None,
    signed_resolutions: Annotated[
        bool,
        typer.Option("--signed-resolutions", help="Settle escalations only with a resolution "
                     "signed by an approver (`underway approvals resolve`); refuse unsigned "
                     "`underway runs resolve`."),
    ] = False,
    anchor_every: Annotated[
        float | None,
        typer.Option("--anchor-every", min=0.001, help="Anchor the heads of every run's "
                     "journal every this many seconds (and when stopping); needs "
                     "--anchor-key and --anchor-log.", show_default=False),
    ] = None,
    anchor_key: Annotated[
        Path | None,
        typer.Option("--anchor-key", help="The anchor signing key (`underway audit "
                     "keygen`).", show_default=False),
    ] = None,
    anchor_log: Annotated[
        Path | None,
        typer.Option("--anchor-log", help="The anchor log to append to (JSON lines).",
                     show_default=False),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=0, max=65535, help="Serve Prometheus metrics "
                     "(steps, tool and model calls, wake-ups, takeovers) at "
                     "http://ADDR:PORT/metrics ([telemetry] metrics_addr, 0.0.0.0 by "
                     "default; [telemetry] metrics_token_env asks scrapes for a token).",
                     show_default=False),
    ] = None,
    traces: Annotated[
        bool,
        typer.Option("--traces", help="Send OpenTelemetry spans of runs, steps, tool and "
                     "model calls, derived from the journal, to the config file's "
                     "telemetry.exporter (OTLP unless it names another; needs the `otel` "
                     "extra)."),
    ] = False,
    no_retention: Annotated[
        bool,
        typer.Option("--no-retention", help="Do not sweep by the config file's retention "
                     "rules (say, on every worker but one)."),
    ] = False,
    keyring: KeyringOption = None,
    config_file: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Lease ready runs and drive them until SIGTERM or SIGINT (then stop gracefully).

    Reads underway.toml (--config): the notifier that tells approvers, tenant budgets,
    the sandboxed calls' limits, policy, telemetry, retention (a sweep every
    retention.every, off the event loop), encryption and the options below, which
    override it; a flag turns on what the file leaves off. On a database that holds
    encrypted payloads the worker needs the keys ([encryption], --keyring,
    $UNDERWAY_KEYRING or $UNDERWAY_KEK) and refuses to start without them. Prints
    `underway worker OWNER ready` once it serves, and a summary when it stops.
    """
    config = read_config(config_file, "worker")
    opts = override(config.worker, app=app_spec, queues=queue or None,
                    concurrency=concurrency, lease_ttl=lease_ttl, poll=poll, grace=grace,
                    eager_start=False if no_eager_start else None, environment=environment,
                    secrets_env_prefix=secrets_prefix, verbose=verbose or None,
                    group_commit=False if no_group_commit else None)
    if opts.app is None:
        raise Problem("no app given: pass --app module:attribute or set worker.app in "
                      "the config file")
    logging.basicConfig(
        level=logging.INFO if opts.verbose else logging.WARNING, stream=sys.stderr,
        format="%(asctime)s underway worker %(process)d %(levelname)s %(message)s",
    )
    anchoring = _anchoring(anchor_every, anchor_key, anchor_log) or config.make_anchoring()
    retention = None if no_retention else config.make_retention()
    guard = config.make_guard_options(
        environment=opts.environment, policy_file=policy_file,
        secrets_env_prefix=opts.secrets_env_prefix, signed_resolutions=signed_resolutions)
    telemetry_opts = override(config.telemetry, metrics_port=metrics_port,
                              traces=traces or None)
    if telemetry_opts.metrics_port is not None:
        import_extra("prometheus_client",
                     what="metrics (--metrics-port, or [telemetry] metrics_port)")
    metrics_token = config.worker_metrics_token()
    _sandbox(config)
    flows, tools = app_code(opts.app, config)
    exporter = config.make_span_exporter(telemetry_opts)
    tracing: telemetry.Tracing | None = None
    with open_store(ctx, db, config=config, keyring=keyring, need_keys=True) as store:
        dialect = store.dialect
        if dialect != "memory":
            needed = max(v for v, _, _ in queries.migrations(dialect))
            have = store.schema_version()
            if have < needed:
                raise Failure(
                    f"the database schema is at version {have}; this worker needs "
                    f"{needed}: run `underway db migrate` first"
                )
        if exporter is not None:
            tracing = telemetry.Tracing(store, exporter, flows=flows,
                                        service_name=telemetry_opts.service_name)
        engine = Engine(
            store, flows=flows, tools=tools, lease_ttl=opts.lease_ttl,
            guard_options=guard, metrics=_metrics(telemetry_opts, metrics_token, tracing),
            group_commit=opts.group_commit,
        )
        if config.budgets is not None:
            engine.guard.tenant_usage_ttl = config.budgets.usage_ttl
        if isinstance(store.codec.sealer, Envelope):
            # Key rotations started anywhere are carried on by any worker.
            engine.register(rotation_flow(store))
        w = Worker(engine, queues=opts.queues, concurrency=opts.concurrency,
                   poll=opts.poll, grace=opts.grace, anchoring=anchoring,
                   retention=retention, eager=opts.eager_start)
        try:
            asyncio.run(_serve(w))
        finally:
            if tracing is not None:
                tracing.shutdown()  # sends what was journaled and not yet sent
    anchored = f", {w.anchored} anchor records" if anchoring is not None else ""
    purged = f", {w.purged} runs purged" if retention is not None else ""
    if retention is not None and retention.forgets:
        purged += f", {w.forgotten} forgotten"
    typer.echo(f"underway worker {w.owner} stopped: {w.activations} activations, "
               f"{w.handed_back} runs handed back{anchored}{purged}")


def _sandbox(config: Config) -> None:
    """Make the file's ``[sandbox]`` limits this process's (without it, the defaults)."""
    if config.sandbox is None:
        return
    try:
        configure_worker(WorkerLimits(**config.sandbox.limits()))
    except ConfigurationError as exc:
        raise ConfigError(config.source or "the configuration", "sandbox", str(exc)) from None


def _metrics(
    opts: TelemetrySection, token: str | None, tracing: Metrics | None
) -> Metrics | None:
    """The worker's Prometheus metrics, served as ``opts`` say (no port: no metrics) and
    asking scrapes for ``token`` when one is given, and its spans (``tracing``)."""
    seams: list[Metrics] = [tracing] if tracing is not None else []
    if opts.metrics_port is not None:
        metrics = telemetry.PrometheusMetrics()
        telemetry.serve_metrics(metrics.registry, opts.metrics_port, addr=opts.metrics_addr,
                                token=token)
        typer.echo(f"underway worker metrics on http://{opts.metrics_addr}:"
                   f"{opts.metrics_port}/metrics" + (" (token required)" if token else ""),
                   err=True)
        seams.append(metrics)
    return telemetry.Fanout(*seams) if seams else None


def _anchoring(
    every: float | None, key: Path | None, log: Path | None
) -> Anchoring | None:
    """The worker's anchoring from its three options: all of them, or none."""
    given = [every is not None, key is not None, log is not None]
    if not any(given):
        return None
    if not all(given):
        raise Problem("--anchor-every, --anchor-key and --anchor-log go together")
    assert every is not None and key is not None and log is not None
    return Anchoring(key=load_private_key(key), sink=FileAnchorLog(log), every=every)


async def _serve(w: Worker) -> None:
    loop = asyncio.get_running_loop()

    def stop() -> None:
        # A second signal skips the rest of the grace period.
        typer.echo(f"underway worker {w.owner} stopping: {w.in_flight} runs in flight")
        sys.stdout.flush()
        w.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    serving = asyncio.create_task(w.run())
    ready = asyncio.create_task(w.ready.wait())
    await asyncio.wait({serving, ready}, return_when=asyncio.FIRST_COMPLETED)
    if ready.done():
        typer.echo(f"underway worker {w.owner} ready")
        sys.stdout.flush()
    else:
        ready.cancel()
    await serving
