"""``/metrics``: Prometheus text. What the database says (runs by status, dead runs, runs
waiting for a person) is counted on indexes of the runs table on each scrape, on a worker
thread (never on the event loop). No journal is read
(:class:`~underway.telemetry.DatabaseCollector`). An engine's metrics registry, when the
app is given one (an engine in the same process), is served with it.

Without a token it is open, like ``/healthz``; with one (``[serve] metrics_token_env``),
a scrape must carry it as ``Authorization: Bearer <token>``."""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from ..telemetry import DatabaseCollector
from ._auth import ServiceState
from ._problems import ApiProblem, problem_responses


def install_metrics(app: FastAPI, extra: CollectorRegistry | None = None, *,
                    token: str | None = None) -> None:
    """Add ``GET /metrics`` to ``app``; with ``token``, only a scrape that bears it."""
    state: ServiceState = app.state.underway
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(state.client))
    expected = None if token is None else f"Bearer {token}".encode()

    def scrape() -> bytes:
        body = generate_latest(registry)
        return body if extra is None else body + generate_latest(extra)

    @app.get("/metrics", tags=["health"], response_class=Response,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition"},
                        **problem_responses(401)})
    async def get_metrics(request: Request) -> Response:
        """Prometheus metrics: runs by tenant and status, dead runs and pending requests,
        read from the database when scraped."""
        if expected is not None:
            given = request.headers.get("authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, expected):
                raise ApiProblem(401, "unauthorized", "Unauthorized",
                                 "/metrics needs the metrics token: Authorization: Bearer "
                                 "<token> ([serve] metrics_token_env)",
                                 headers={"WWW-Authenticate": "Bearer"})
        body = await run_in_threadpool(scrape)
        return Response(content=body, media_type=CONTENT_TYPE_LATEST)
