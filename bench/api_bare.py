"""The baseline server of ``bench/api.py``: a bare FastAPI endpoint that reads one run row
(``store.get_run``) and returns it, served by :func:`underway.service.serve` (the uvicorn
settings ``underway serve`` uses) on the same database: the least an HTTP read of a run can
cost here. With a third argument N, N processes share the port as ``underway serve
--workers N`` runs them (:func:`underway.service.serve_workers`).

    python bench/api_bare.py DATABASE_URL PORT [WORKERS]
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

import underway as uw
from underway.service import serve, serve_workers
from underway.store.base import Store


def bare(store: Store) -> FastAPI:
    """The bare app over ``store``: ``GET /bare/{run_id}`` and ``/healthz``."""
    app = FastAPI()

    @app.get("/bare/{run_id}")
    def read(run_id: str) -> dict[str, Any]:
        row = store.get_run("bench", run_id)
        return {"run_id": run_id, "status": None if row is None else row.status}

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    """Serve the bare app on the database and port named by the arguments."""
    url, port = sys.argv[1], int(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if workers > 1:
        @contextmanager
        def made() -> Iterator[FastAPI]:
            with uw.Client.connect(url, migrate=False) as client:
                yield bare(client.store)

        serve_workers(made, port=port, workers=workers, log_level="warning")
        return
    with uw.Client.connect(url, migrate=False) as client:
        serve(bare(client.store), port=port, log_level="warning")


if __name__ == "__main__":
    main()
