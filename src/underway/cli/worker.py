"""``underway worker``: lease and drive ready runs until stopped by SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import telemetry
from ..approvals import load_private_key
from ..audit import Anchoring, FileAnchorLog
from ..engine import Engine
from ..policy import load_policy
from ..secrets import EnvSecrets
from ..store import queries
from ..telemetry import Metrics
from ..worker import Worker, load_app
from ._common import DbOption, Problem, handle_errors, open_store

app = typer.Typer(add_completion=False)


@app.command("worker")
@handle_errors
def worker(
    ctx: typer.Context,
    app_spec: Annotated[
        str,
        typer.Option(
            "--app",
            help="What the worker runs, as module:attribute: a Flow, a list of Flows and "
            "Tools, or a function of no arguments returning one. The current directory "
            "is on the import path.",
            show_default=False,
        ),
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", help="Serve this queue (repeat for several; default: every "
                     "queue)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Runs driven at once.")
    ] = 10,
    lease_ttl: Annotated[
        float,
        typer.Option("--lease-ttl", min=0.1, help="Seconds a lease lasts unless renewed; "
                     "another worker takes a run over after this once its worker is gone."),
    ] = 30.0,
    poll: Annotated[
        float,
        typer.Option("--poll", min=0.01, help="Longest an idle worker waits before looking "
                     "for work again."),
    ] = 1.0,
    grace: Annotated[
        float,
        typer.Option("--grace", min=0, help="On SIGTERM/SIGINT, seconds the steps in flight "
                     "may take to finish before they are cancelled and handed back."),
    ] = 30.0,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log each run handed back or given up.")
    ] = False,
    environment: Annotated[
        str | None,
        typer.Option("--environment", help="What policies see as the environment (dev, "
                     "staging, prod...).", show_default=False),
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
                     "http://0.0.0.0:PORT/metrics.", show_default=False),
    ] = None,
    traces: Annotated[
        bool,
        typer.Option("--traces", help="Make OpenTelemetry spans of activations, steps, "
                     "tool and model calls with the global tracer provider (configure an "
                     "SDK, the `otel` extra, for them to go anywhere)."),
    ] = False,
    db: DbOption = None,
) -> None:
    """Lease ready runs and drive them until SIGTERM or SIGINT (then stop gracefully).

    Prints `underway worker OWNER ready` once it serves, and a summary when it stops.
    """
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
        format="%(asctime)s underway worker %(process)d %(levelname)s %(message)s",
    )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    anchoring = _anchoring(anchor_every, anchor_key, anchor_log)
    flows, tools = load_app(app_spec)
    with open_store(ctx, db) as store:
        dialect = store.dialect
        if dialect != "memory":
            needed = max(v for v, _, _ in queries.migrations(dialect))
            have = store.schema_version()
            if have < needed:
                raise Problem(
                    f"the database schema is at version {have}; this worker needs {needed}: "
                    "run `underway db migrate` first"
                )
        engine = Engine(
            store, flows=flows, tools=tools, lease_ttl=lease_ttl, environment=environment,
            policy=load_policy(policy_file) if policy_file else None,
            secrets=EnvSecrets(prefix=secrets_prefix) if secrets_prefix is not None else None,
            signed_resolutions=signed_resolutions, metrics=_metrics(metrics_port, traces),
        )
        w = Worker(engine, queues=queue or None, concurrency=concurrency, poll=poll,
                   grace=grace, anchoring=anchoring)
        asyncio.run(_serve(w))
    anchored = f", {w.anchored} anchor records" if anchoring is not None else ""
    typer.echo(f"underway worker {w.owner} stopped: {w.activations} activations, "
               f"{w.handed_back} runs handed back{anchored}")


def _metrics(port: int | None, traces: bool) -> Metrics | None:
    """The worker's Prometheus metrics, served on ``port`` (None: no metrics), and its
    spans when ``traces``."""
    seams: list[Metrics] = [telemetry.Tracing()] if traces else []
    if port is not None:
        metrics = telemetry.PrometheusMetrics()
        telemetry.serve_metrics(metrics.registry, port)
        typer.echo(f"underway worker metrics on http://0.0.0.0:{port}/metrics", err=True)
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
