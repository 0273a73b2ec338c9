"""The client over HTTP: the same calls through ``underway serve`` (uvicorn in a thread of this
process, on loopback) and on the database URL the server uses, interleaved in one run.

Each call over HTTP is one request or a few: a start is one POST; reading a run's row is one
GET of the runs list; a run's state is one GET of its events, folded in the client (a read
of run data: the server appends an access-log entry, a durable write); a signal is one POST
(the server checks its name against the flow). The figure is the time
of a call over HTTP against the least an HTTP request to the same server costs (``GET
/healthz``, no key, no database): what the call's requests and their work add to bare round
trips. The same call on the database is a diagnostic figure beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway.apikeys import issue_key
from underway.service import ServerThread, create_app

REPS = 60
RUNS = 200
TARGETS = {"start": 8.0, "get_run": 5.0, "list_runs_50": 8.0, "state": 10.0,
           "signal": 8.0}
"""The most each call over HTTP may cost, as a ratio of one bare request to the server."""


def _calls(client: uw.Client, run_ids: list[str]) -> dict[str, Callable[[int], object]]:
    return {
        "start": lambda i: client.start("orders", {"n": i}),
        "get_run": lambda i: client.get_run(run_ids[i % len(run_ids)]),
        "list_runs_50": lambda i: client.list_runs(limit=50),
        "state": lambda i: client.state(run_ids[i % len(run_ids)]),
        "signal": lambda i: client.signal(run_ids[i % len(run_ids)], "poke", {"i": i}),
    }


def _figures(url: str, db: str) -> list[Figure]:
    with uw.Client(url) as local:
        run_ids = [local.start("orders", {"n": i})[0] for i in range(RUNS)]
        token = issue_key(local.store, tenant_id="default", role="operator", name="bench",
                          now=time.time()).token
        with ServerThread(create_app(local)) as server, \
                uw.Client(server.url, api_key=token) as remote:
            remote.list_runs(limit=1)  # connected, and the key's tenant known
            http = remote._transport._http  # type: ignore[attr-defined]
            timed: dict[str, dict[str, list[float]]] = {"db": {}, "http": {}, "bare": {}}
            for rep in range(REPS):
                began = time.perf_counter()
                http.get("/healthz").raise_for_status()
                timed["bare"].setdefault("healthz", []).append(time.perf_counter() - began)
                for side, client in (("db", local), ("http", remote)):
                    for name, call in _calls(client, run_ids).items():
                        began = time.perf_counter()
                        call(rep)
                        timed[side].setdefault(name, []).append(time.perf_counter() - began)
    bare = median(timed["bare"]["healthz"]) * 1e3
    figures = []
    for name, target in TARGETS.items():
        value = median(timed["http"][name]) * 1e3
        on_db = median(timed["db"][name]) * 1e3
        figures.append(Figure(f"{db}.client_http_{name}", value, "ms", bare, value / bare,
                              f"<= {target}", value / bare <= target,
                              note="baseline: one GET /healthz to the same server"))
        figures.append(Figure(f"{db}.client_http_{name}_vs_database", value, "ms", on_db,
                              value / on_db, "diagnostic",
                              note="baseline: the same call on the database URL"))
    return figures


def bench_sqlite() -> list[Figure]:
    """The client's calls over HTTP and on SQLite."""
    with sqlite_dir() as d:
        return _figures(f"sqlite:///{d}/client.db", "sqlite")


def bench_postgres() -> list[Figure]:
    """The client's calls over HTTP and on PostgreSQL."""
    with pg_schema() as (_, url):
        return _figures(url, "postgres")
