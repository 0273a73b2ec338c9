"""``underway events send``: deliver one outside event through intake."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ..client import Client
from ..flow import Flow
from ..loading import call_factory, import_object, put_on_path
from ..scheduling.intake import Routes, StartFlow, intake
from ..store.base import Store
from ._common import (
    DbOption,
    Problem,
    app_code,
    handle_errors,
    open_store,
    parse_json,
    search_path,
    warn_undeclared,
)

app = typer.Typer(help="Deliver outside events to runs.", no_args_is_help=True)


AppOption = Annotated[str | None, typer.Option(
    "--app", help="The flows, as module:attribute (as for `underway worker`). An event "
    "that starts a run has its input checked against the flow's input model at once: a "
    "bad one is refused with its fields named, and no run is created.",
    show_default=False)]


def intake_client(store: Store, table: Routes, app_spec: str | None) -> Client:
    """The client an intake command acts through: it knows the flows of ``--app``, so a
    route's input is checked at the door, as ``underway serve --app`` checks a webhook's.
    Routes that start a flow it does not know are named on stderr: their input is
    checked only by the worker, which fails the run.

    Args:
        store: The store.
        table: The routes.
        app_spec: What ``--app`` said (None: no flows).
    """
    flows = app_code(app_spec)[0] if app_spec is not None else []
    warn_unchecked(table, flows)
    return Client(store, flows=flows)


def warn_unchecked(table: Routes, flows: list[Flow[Any, Any]]) -> None:
    """Name on stderr the routes' flows whose input nothing can check at the door: they
    start a flow by a name none of ``flows`` has.

    Args:
        table: The routes.
        flows: The flows of ``--app``.
    """
    known = {f.name for f in flows}
    unchecked = sorted({str(r.flow) for r in table.values() if isinstance(r, StartFlow)
                        and isinstance(r.flow, str) and r.flow not in known})
    if unchecked:
        typer.echo(
            f"warning: the routes start {', '.join(map(repr, unchecked))} by name, and no "
            "--app gives that code: an event whose input does not fit is not refused at "
            "the door; the worker fails its run instead", err=True)


def load_routes(spec: str, *, search: list[str] | None = None) -> Routes:
    """Resolve ``module:attribute`` to a routing table: a :class:`Routes`, a mapping of
    event type to route, or a function of no arguments returning one. It is imported as
    ``--app`` is (``search``, by default :func:`search_path`, first on the import path)."""
    put_on_path(search_path() if search is None else search)
    obj: Any = import_object(spec, option="--routes", example="myapp.intake:routes")
    if callable(obj) and not isinstance(obj, Mapping):
        obj = call_factory(obj, option="--routes", spec=spec)
    if not isinstance(obj, Mapping):
        raise Problem(
            f"--routes {spec!r} is a {type(obj).__name__}; it must be Routes, a dict of event "
            "type to StartFlow/Signal, or a function returning one"
        )
    return obj if isinstance(obj, Routes) else Routes(obj)


@app.command("send")
@handle_errors
def send(
    ctx: typer.Context,
    entity: Annotated[str, typer.Option("--entity", help="The entity the event is about.",
                                        show_default=False)],
    event_type: Annotated[str, typer.Option("--type", help="The event type routes match on.",
                                            show_default=False)],
    source: Annotated[str, typer.Option("--source", help="Where the event comes from.",
                                        show_default=False)],
    key: Annotated[str, typer.Option("--key", help="Idempotency key: an event with a key "
                                     "already acted on does nothing again.",
                                     show_default=False)],
    routes: Annotated[str, typer.Option("--routes", help="The routing table, as "
                                        "module:attribute.", show_default=False)],
    payload: Annotated[
        str | None, typer.Option("--payload", help="The event's payload, as JSON.")
    ] = None,
    permission: Annotated[
        list[str] | None,
        typer.Option("--permission", help="A permission the event carries (repeatable)."),
    ] = None,
    occurred_at: Annotated[
        str | None,
        typer.Option("--occurred-at", help="When it happened: ISO 8601 with an offset "
                     "(default: now).", show_default=False),
    ] = None,
    purpose: Annotated[
        str | None,
        typer.Option("--purpose", help="What the event asks to be acted on for (default: "
                     "the route's purpose).", show_default=False),
    ] = None,
    consent: Annotated[
        str | None,
        typer.Option("--consent", help="The reference of the consent the event comes with.",
                     show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    app_spec: AppOption = None,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant the event belongs to.")]
    = "default",
    db: DbOption = None,
) -> None:
    """Start a run for the event, or signal the run that owns its entity; once per key."""
    event = {
        "tenant_id": tenant, "entity_id": entity, "event_type": event_type,
        "occurred_at": occurred_at or datetime.fromtimestamp(time.time(), UTC).isoformat(),
        "source": source, "permissions": permission or [], "idempotency_key": key,
        "payload": parse_json(payload, "--payload"), "purpose": purpose, "consent": consent,
    }
    table = load_routes(routes)
    with open_store(ctx, db) as store:
        client = intake_client(store, table, app_spec)
        result = intake(client, event, table)
        if result.action == "signalled" and result.run_id is not None:
            row = store.get_run(tenant, result.run_id)
            if row is not None and client.declared_signals(result.run_id,
                                                           tenant_id=tenant) is None:
                route = table.get(event_type)
                warn_undeclared(row.flow, (route.signal if route is not None else None)
                                or event_type)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(result)))
    elif result.action in ("started", "signalled"):
        typer.echo(f"{result.action} run {result.run_id}")
    else:
        typer.echo(f"{result.action}: {result.reason}")
