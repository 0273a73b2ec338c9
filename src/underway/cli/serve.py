"""``underway serve``: the HTTP API (:mod:`underway.service`) on one database.

This module imports FastAPI and uvicorn (the ``service`` extra), so the CLI loads it only
when ``serve`` is run or listed (see :data:`underway.cli.LAZY`)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..client import Client
from ..flow import Flow
from ..service import create_app, serve_workers
from ..service import serve as run_server
from ..service._workers import listening
from ..store.base import Store
from ._common import (
    ConfigOption,
    DbOption,
    Failure,
    KeyringOption,
    app_code,
    handle_errors,
    open_store,
    override,
    read_config,
    search_path,
)
from .events import load_routes, warn_unchecked

if TYPE_CHECKING:
    from fastapi import FastAPI

app = typer.Typer(add_completion=False)


@app.command("serve", short_help="Serve the HTTP API: runs, approvals, webhooks, admin.")
@handle_errors
def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(
        "--host", help="Address to listen on (default 127.0.0.1).", show_default=False)]
    = None,
    port: Annotated[int | None, typer.Option(
        "--port", min=0, max=65535, help="Port to listen on (default 8420).",
        show_default=False)] = None,
    routes: Annotated[
        str | None,
        typer.Option("--routes", help="Intake routes for POST /v1/intake/{source}, as "
                     "module:attribute (as for `underway events send`).", show_default=False),
    ] = None,
    app_spec: Annotated[
        str | None,
        typer.Option("--app", help="The flows, as module:attribute (as for `underway "
                     "worker`): starts are checked against them (an unknown flow or a bad "
                     "input is refused) instead of started by name.", show_default=False),
    ] = None,
    log_level: Annotated[str | None, typer.Option(
        "--log-level", help="uvicorn's log level (default info).", show_default=False)]
    = None,
    max_body_bytes: Annotated[int | None, typer.Option(
        "--max-body-bytes", min=1, help="The largest request body read (default 1 MiB, "
        "1048576); a larger one gets 413.", show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="Server processes sharing the port (default 1). Each "
        "opens its own database connections; the kernel spreads connections over them. "
        "SIGINT or SIGTERM stops them all gracefully (requests in progress finish).",
        show_default=False)] = None,
    keyring: KeyringOption = None,
    config_file: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Serve the HTTP API: runs, approvals, intake webhooks and admin under /v1, with
    /healthz, /readyz and the OpenAPI document at /openapi.json. Every request needs an
    API key (`underway apikeys new`). Reads the [serve] table of underway.toml (--config),
    which these options override, and its database, [approvals] and [encryption]
    (without keys, encrypted payloads read as [encrypted] and writes are refused)."""
    config = read_config(config_file, "serve")
    opts = override(config.serve, host=host, port=port, routes=routes, app=app_spec,
                    log_level=log_level, max_body_bytes=max_body_bytes)
    flows: list[Flow[Any, Any]] = app_code(opts.app, config)[0] if opts.app is not None else []
    table = (load_routes(opts.routes, search=search_path(config))
             if opts.routes is not None else None)
    if table is not None:
        warn_unchecked(table, flows)
    count = workers or 1
    # Every worker signs the console's sessions alike, or one would refuse another's.
    session_secret = config.session_secret() or (
        secrets.token_bytes(32) if count > 1 else None)
    metrics_token = config.metrics_token()

    def build(store: Store) -> FastAPI:
        return create_app(Client(store, flows=flows), routes=table,
                          signed_resolutions=config.approvals.signed_resolutions,
                          session_secret=session_secret, reveal_roles=opts.reveal_roles,
                          metrics_token=metrics_token, max_body_bytes=opts.max_body_bytes)

    @contextmanager
    def served() -> Iterator[FastAPI]:
        with open_store(ctx, db, config=config, keyring=keyring) as store:
            yield build(store)

    with open_store(ctx, db, config=config, keyring=keyring) as store:
        if not store.list_api_keys():
            typer.echo("note: no API key exists yet; make one with `underway apikeys new "
                       "--tenant T --role admin`", err=True)
        if count == 1:
            api = build(store)
            _announce(opts.host, opts.port, count)
            try:
                run_server(api, host=opts.host, port=opts.port, log_level=opts.log_level)
            except SystemExit as exc:
                raise Failure(f"the server could not start on {opts.host}:{opts.port}") \
                    from exc
            return
    # Each worker opens its own store after the fork; the parent holds none open.
    try:
        sockets = listening(opts.host, opts.port, count)
    except OSError as exc:
        raise Failure(f"the server could not start on {opts.host}:{opts.port}: {exc}") from exc
    _announce(opts.host, opts.port, count)
    try:
        serve_workers(served, workers=count, log_level=opts.log_level, sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()


def _announce(host: str, port: int, workers: int) -> None:
    processes = "" if workers == 1 else f", {workers} processes"
    typer.echo(f"underway serve on http://{host}:{port} (API under /v1, OpenAPI at "
               f"/openapi.json{processes})", err=True)
