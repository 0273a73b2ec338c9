"""The app factory: one FastAPI app with the API under ``/v1`` (a router per resource),
``/healthz``, ``/readyz`` and ``/metrics``, problem+json errors and the OpenAPI 3.1 document
at ``/openapi.json``, and the console under ``/`` (:mod:`underway.service.console`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from ..apikeys import ROLES
from ..client import Client
from ..errors import ConfigurationError
from ..scheduling.intake import Route, Routes
from ..store import queries
from ..store.base import Store
from ..webhooks import REPLAY_WINDOW
from . import (
    _activity,
    _admin,
    _approvals,
    _bulk,
    _consents,
    _erasures,
    _intake,
    _live,
    _reads,
    _runs,
    _stream,
)
from ._auth import ServiceState
from ._fast import FastRoutes
from ._inputs import MAX_BODY_BYTES, BodyLimit
from ._links import add_links
from ._metrics import install_metrics
from ._problems import PROBLEM_TYPE, Problem, install, problem_responses, respond
from .console import install_console


class Health(BaseModel):
    """The server answers (``/healthz``), or its database is usable (``/readyz``)."""

    status: str
    schema_version: int | None = None


def create_app(
    target: Client | Store,
    *,
    routes: Routes | Mapping[str, Route] | None = None,
    replay_window: float = REPLAY_WINDOW,
    title: str = "underway",
    metrics: CollectorRegistry | None = None,
    session_secret: bytes | None = None,
    signed_resolutions: bool = False,
    reveal_roles: Iterable[str] = ("admin",),
    metrics_token: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    """The ``underway serve`` app over a client, or a store.

    A store is wrapped in a client without flow code: runs are started by name. The caller
    keeps owning the client or store and closes it after the app stops. ``/metrics`` reports
    what the database says on each scrape.

    Args:
        target: The client, or the store.
        routes: The intake routing table of ``/v1/intake/{source}``; with none, intake
            answers 404.
        replay_window: How old (or how far ahead) a webhook's signed timestamp may be, in
            seconds.
        title: The app's title.
        metrics: Reported on ``/metrics`` after the database's figures. It is the registry
            of a :class:`~underway.telemetry.PrometheusMetrics` whose engine runs in this
            process.
        session_secret: MACs the console's session cookies (see
            :func:`~underway.service.console.install_console`).
        signed_resolutions: What the workers enforce. It makes the app's client refuse
            unsigned resolutions and resumes (:meth:`~underway.client.Client.signed_only`).
            The API answers 409 and the console an error page at once. It does not accept a
            signal the workers will refuse. A client that already refuses them keeps
            refusing.
        reveal_roles: The roles whose keys may ask to see the fields tools declare sensitive
            (:mod:`underway.redaction`).
        metrics_token: A scrape of ``/metrics`` must bear it; None leaves ``/metrics`` open.
        max_body_bytes: A larger request body is answered 413 before it is read. Every
            request is also checked before it is parsed (:mod:`underway.service._inputs`).
    """
    client = target if isinstance(target, Client) else Client(target)
    if signed_resolutions:
        client = client.signed_only()
    table = None if routes is None else routes if isinstance(routes, Routes) else Routes(routes)
    app = FastAPI(
        title=title, version=_version(), openapi_url="/openapi.json", docs_url="/docs",
        redoc_url=None, generate_unique_id_function=operation_id,
        description="The underway API: runs, approvals, intake webhooks and admin, every "
        "request scoped to its API key's tenant and role.",
    )
    unknown = set(reveal_roles) - set(ROLES)
    if unknown:
        raise ConfigurationError(f"reveal_roles names unknown roles {sorted(unknown)}; "
                                 f"choose among {', '.join(ROLES)}")
    if max_body_bytes < 1:
        raise ConfigurationError(f"max_body_bytes must be at least 1, not {max_body_bytes}")
    app.state.underway = ServiceState(client, table, replay_window, frozenset(reveal_roles))
    install(app)
    # Bulk first: /v1/runs/bulk/resume is a bulk operation, not a run named "bulk".
    for module in (_bulk, _runs, _stream, _live, _approvals, _intake, _consents, _erasures, _reads,
                   _activity, _admin):
        app.include_router(module.router)
    _health(app)
    install_metrics(app, metrics, token=metrics_token)
    # Inside the console's security headers and the body limit: the plain reads of a run
    # and signals, answered without FastAPI's per-request machinery (see _fast).
    app.add_middleware(FastRoutes)
    install_console(app, session_secret=session_secret)
    # Outermost: an over-long body is refused before any other layer reads it.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.openapi = partial(_document, app)  # type: ignore[method-assign]
    return app


def _health(app: FastAPI) -> None:
    state: ServiceState = app.state.underway

    @app.get("/healthz", response_model=Health, tags=["health"])
    def get_health() -> Health:
        """The server is up."""
        return Health(status="ok")

    # This route's 503 puts the Problem schema in the OpenAPI components; every other
    # problem response refers to it.
    @app.get("/readyz", response_model=Health, tags=["health"],
             responses=problem_responses(503, register=True))
    async def get_readiness() -> Any:
        """The database answers and its schema is the one this code knows."""
        try:
            found = await run_in_threadpool(state.store.schema_version)
        except Exception as exc:
            return _unready(f"the database does not answer: {type(exc).__name__}")
        dialect = state.store.dialect
        expected = 1 if dialect == "memory" else queries.latest_version(dialect)
        if found != expected:
            return _unready(f"schema version {found}, expected {expected}: run "
                            "`underway db migrate`")
        return Health(status="ready", schema_version=found)


def operation_id(route: APIRoute) -> str:
    """An operation's id in the OpenAPI document: its endpoint function's name, such as
    ``list_runs`` or ``send_signal``. A client generated from the document names its
    methods by them, so each endpoint is named like a method, once in the app (a test
    holds them unique and method-like); FastAPI's default would be
    ``list_runs_v1_runs_get``."""
    return route.name


def _document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document FastAPI builds, with the schemas of bodies an endpoint reads
    itself (the signed intake body, checked against its signature first) added to its
    components, so every ``$ref`` resolves, and the links from the ids a response names to
    the operations that take them (:mod:`underway.service._links`)."""
    if app.openapi_schema is None:
        doc = FastAPI.openapi(app)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in _intake.RAW_BODIES:
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, inner in schema.pop("$defs", {}).items():
                schemas.setdefault(name, inner)
            schemas.setdefault(model.__name__, schema)
        add_links(doc)
    return app.openapi_schema or {}


def _unready(detail: str) -> JSONResponse:
    return respond(Problem(type=PROBLEM_TYPE + "not-ready", title="Not ready", status=503,
                           detail=detail))


def _version() -> str:
    try:
        return version("underway")
    except PackageNotFoundError:
        return "0"
