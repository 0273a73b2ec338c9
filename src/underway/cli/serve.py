"""``underway serve``: the HTTP API (:mod:`underway.service`) on one database.

This module imports FastAPI and uvicorn (the ``service`` extra), so the CLI loads it only
when ``serve`` is run or listed (see :data:`underway.cli.LAZY`)."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from ..client import Client
from ..flow import Flow
from ..loading import load_app
from ..service import create_app
from ..service import serve as run_server
from ._common import DbOption, Problem, handle_errors, open_store
from .events import load_routes

app = typer.Typer(add_completion=False)


@app.command("serve", short_help="Serve the HTTP API: runs, approvals, webhooks, admin.")
@handle_errors
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")]
    = 8420,
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
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's log level.")]
    = "info",
    db: DbOption = None,
) -> None:
    """Serve the HTTP API: runs, approvals, intake webhooks and admin under /v1, with
    /healthz, /readyz and the OpenAPI document at /openapi.json. Every request needs an
    API key (`underway apikeys new`)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    flows: list[Flow[Any, Any]] = load_app(app_spec)[0] if app_spec is not None else []
    table = load_routes(routes) if routes is not None else None
    with open_store(ctx, db) as store:
        if not store.list_api_keys():
            typer.echo("note: no API key exists yet; make one with `underway apikeys new "
                       "--tenant T --role admin`", err=True)
        api = create_app(Client(store, flows=flows), routes=table)
        typer.echo(f"underway serve on http://{host}:{port} (API under /v1, OpenAPI at "
                   "/openapi.json)", err=True)
        try:
            run_server(api, host=host, port=port, log_level=log_level)
        except SystemExit as exc:
            raise Problem(f"the server could not start on {host}:{port}") from exc
