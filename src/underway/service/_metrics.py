"""``/metrics``: Prometheus text, unauthenticated like ``/healthz``. What the database says
(runs by status, dead runs, runs waiting for a person) is computed on each scrape, on a
worker thread (never on the event loop); an engine's metrics registry, when the app is given
one (an engine in the same process), is served with it."""

from __future__ import annotations

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from ..telemetry import DatabaseCollector
from ._auth import ServiceState


def install_metrics(app: FastAPI, extra: CollectorRegistry | None = None) -> None:
    """Add ``GET /metrics`` to ``app``."""
    state: ServiceState = app.state.underway
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(state.client))

    def scrape() -> bytes:
        body = generate_latest(registry)
        return body if extra is None else body + generate_latest(extra)

    @app.get("/metrics", tags=["health"], response_class=Response,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
    async def metrics() -> Response:
        """Prometheus metrics: runs by tenant and status, dead runs and pending requests,
        read from the database when scraped."""
        body = await run_in_threadpool(scrape)
        return Response(content=body, media_type=CONTENT_TYPE_LATEST)
