"""Cheap observation (issue 28, target 6): ``/metrics`` with 10,000 waiting runs, the
console's state after an event deep in a 10,000-event run, and the runs list at 1,000,000
runs against 10,000.

Three databases of each kind (SQLite files, PostgreSQL schemas):

- *waiting*: 10,000 waiting runs (9,000 on a signal, 1,000 held for approval), 1,000
  completed and 100 escalated with a question, and one run of ``DEEP_EVENTS`` events built
  by an engine (a checkpoint every 100 events, as the engine leaves them);
- *small* and *big*: ``SMALL`` and ``BIG`` runs of one tenant, the same mix of statuses,
  flows and times in both (6 of 10 completed, 3 waiting on a signal, 1 failed).

The runs rows are inserted by one SQL statement each (a recursive CTE on SQLite,
``generate_series`` on PostgreSQL): what ``/metrics`` and the listing read is the runs
table, and building a million runs through the engine would take hours here. On
PostgreSQL the tables are analysed and vacuumed first, as autovacuum does soon after a
bulk insert.

``underway serve``'s app (a uvicorn thread per database) answers one signed-in browser
(an httpx client in this process). Requests are sequential and interleaved with their
baselines, so load drift hits both alike.
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from observe_counts import step_figures
from underway.apikeys import issue_key
from underway.effects import ModelReply
from underway.journal import Journal
from underway.journal._journal import states_around
from underway.journal.state import RunState
from underway.runner import Runner
from underway.service import ServerThread, create_app

SMALL = 10_000
BIG = int(os.environ.get("UNDERWAY_BENCH_OBSERVE_RUNS", "1000000"))
"""Runs of the big listing database (``UNDERWAY_BENCH_OBSERVE_RUNS`` for a quick try)."""
DEEP_EVENTS = 10_000
TENANT = "bench"
T0 = 1_717_200_000.0
SCRAPES = 60
STATES = 60
PAGES = 60
METRICS_TARGET_MS = 50.0
STATE_TARGET_MS = 30.0
FLAT = 1.2
PAGE = "/runs?status=completed"
"""The console page the state is compared with (its rows need no journal: the held
runs' rows of this database have none)."""


class Turns(BaseModel):
    n: int = 0


class Echo:
    """A model that answers at once, with usage (as the console benchmark's)."""

    name = "bench-model"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": "noted", "request": request}, "bench-model", 50, 10, 0.001)


@uw.tool(read_only=True)
async def look(args: Turns) -> dict[str, Any]:
    """A lookup with a small result."""
    return {"n": args.n, "note": "nothing to report " * 3}


deep_flow: uw.Flow[Turns, Any] = uw.Flow("deep", state=Turns, tools=[look], signals=["poke"])
STEPS = (DEEP_EVENTS - 4) // 4
"""Four events a step (start, a tool call, a model call, completion), as the console
benchmark's run: the start's two, the first step's clock reading and the final wait."""


@deep_flow.step(start=True)
async def turn(ctx: uw.RunContext[Turns, Any]) -> Any:
    if ctx.state.n == 0:
        ctx.now()
    await ctx.call(look, {"n": ctx.state.n})
    await ctx.model(Echo(), {"prompt": f"turn {ctx.state.n}"})
    ctx.state.n += 1
    return ctx.goto(turn) if ctx.state.n < STEPS else ctx.wait("poke", then=turn)


# One statement a database: the mix of statuses of the listing (i % 10) and of the
# metrics database (i % 111: 100 waiting runs in 111, 10 of them held for approval, 10
# completed, one escalated with a question).
_SQLITE_ROWS = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
INSERT INTO runs (tenant_id, run_id, flow, status, step, last_seq, last_hash, next_wake_at,
                  waiting_signal, created_at, updated_at, request_kind)
SELECT :tenant, printf('r%08d', i),
       CASE i % 3 WHEN 0 THEN 'invoices' WHEN 1 THEN 'refunds' ELSE 'triage' END,
       {status}, 'step', 3, 'h', NULL, {signal}, :t0 + i * 0.25, :t0 + i * 0.25, {kind}
  FROM n
"""
_PG_ROWS = """
INSERT INTO runs (tenant_id, run_id, flow, status, step, last_seq, last_hash, next_wake_at,
                  waiting_signal, created_at, updated_at, request_kind)
SELECT %(tenant)s, 'r' || lpad(i::text, 8, '0'),
       CASE i %% 3 WHEN 0 THEN 'invoices' WHEN 1 THEN 'refunds' ELSE 'triage' END,
       {status}, 'step', 3, 'h', NULL, {signal}, %(t0)s + i * 0.25, %(t0)s + i * 0.25, {kind}
  FROM generate_series(0, %(count)s - 1) AS i
"""
_LISTING = {
    "status": "CASE WHEN i % 10 < 6 THEN 'completed' WHEN i % 10 < 9 THEN 'waiting' "
              "ELSE 'failed' END",
    "signal": "CASE WHEN i % 10 BETWEEN 6 AND 8 THEN 'poke' END",
    "kind": "NULL",
}
_WAITING = {
    "status": "CASE WHEN i % 111 < 100 THEN 'waiting' WHEN i % 111 < 110 THEN 'completed' "
              "ELSE 'escalated' END",
    "signal": "CASE WHEN i % 111 < 90 THEN 'poke' WHEN i % 111 < 100 "
              "THEN 'underway.approval' END",
    "kind": "CASE WHEN i % 111 BETWEEN 90 AND 99 THEN 'approval' "
            "WHEN i % 111 = 110 THEN 'question' END",
}


def _fill(url: str, count: int, mix: dict[str, str]) -> None:
    """Insert ``count`` runs rows of ``mix`` in one statement (the store is migrated)."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(_SQLITE_ROWS.format(**mix),
                         {"count": count, "tenant": TENANT, "t0": T0})
            conn.execute("ANALYZE")
        return
    import psycopg

    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        pg_mix = {k: v.replace("%", "%%") for k, v in mix.items()}
        conn.execute(_PG_ROWS.format(**pg_mix).encode(),
                     {"count": count, "tenant": TENANT, "t0": T0})
        conn.execute("VACUUM ANALYZE runs")


def _sign_in(http: httpx.Client, token: str) -> None:
    form = http.get("/login").text
    found = re.search(r'name="csrf" value="([^"]+)"', form)
    assert found, form
    r = http.post("/login", data={"token": token, "csrf": found.group(1), "next": "/runs"})
    assert r.status_code == 303, r.text


@contextmanager
def _served(client: uw.Client) -> Iterator[httpx.Client]:
    """The console of ``client``'s database, with a browser signed in as a viewer."""
    token = issue_key(client.store, tenant_id=TENANT, role="viewer", name="bench",
                      now=time.time()).token
    with ServerThread(create_app(client)) as server, \
            httpx.Client(base_url=server.url, timeout=120.0) as http:
        _sign_in(http, token)
        yield http


def _ms(http: httpx.Client, path: str) -> float:
    began = time.perf_counter()
    r = http.get(path)
    elapsed = time.perf_counter() - began
    assert r.status_code == 200, f"{path}: {r.status_code} {r.text[:300]}"
    return elapsed * 1e3


def _timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1e3


def _cpu_ms(fn: Callable[[], object]) -> float:
    """The process's CPU time of ``fn()``, in ms."""
    began = time.process_time()
    fn()
    return (time.process_time() - began) * 1e3


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _waiting_figures(url: str, db: str) -> list[Figure]:
    """/metrics with 10,000 waiting runs, and the state deep in a 10,000-event run."""
    client = uw.Client.connect(url)
    try:
        run_id, _ = client.start(deep_flow.name, None, tenant_id=TENANT)
        asyncio.run(Runner(uw.Engine(client.store, flows=[deep_flow])).run_until_idle())
        # After the engine is done: a worker would take the journal-less rows for broken.
        _fill(url, 11_100, _WAITING)
        events = client.get_run(run_id, tenant_id=TENANT).last_seq
        assert events >= DEEP_EVENTS - 3, events
        gc.collect()
        seqs = [events // 2 + (i * 997) % (events // 2 - 1) for i in range(STATES)]
        samples: dict[str, list[float]] = {k: [] for k in (
            "metrics", "healthz", "state", "page", "fold", "states_at")}
        with _served(client) as http:
            body = http.get("/metrics").text
            assert re.search(r'underway_pending_requests\{[^}]*kind="approval"[^}]*\} 1000\.0',
                             body), body[:2000]
            for _ in range(3):
                _ms(http, "/metrics"), _ms(http, "/healthz"), _ms(http, PAGE)
                _ms(http, f"/runs/{run_id}/state?at={seqs[0]}")
            for _ in range(SCRAPES):
                samples["healthz"].append(_ms(http, "/healthz"))
                samples["metrics"].append(_ms(http, "/metrics"))
            for seq in seqs:
                samples["page"].append(_ms(http, PAGE))
                samples["state"].append(_ms(http, f"/runs/{run_id}/state?at={seq}"))
        journal = Journal(client.store)
        for seq in seqs[:10]:
            samples["states_at"].append(_timed(
                lambda s=seq: journal.states_at(TENANT, run_id, s)))
            samples["fold"].append(_timed(lambda s=seq: states_around(
                RunState(tenant_id=TENANT, run_id=run_id),
                journal.history(TENANT, run_id), s)))
    finally:
        client.close()
    p50 = {k: median(v) for k, v in samples.items()}
    return [
        Figure(f"{db}.metrics_10k_waiting_p50", p50["metrics"], "ms", p50["healthz"],
               p50["metrics"] / p50["healthz"], f"value <= {METRICS_TARGET_MS:g} ms",
               p50["metrics"] <= METRICS_TARGET_MS,
               note="GET /metrics, 10,000 waiting runs (1,000 held for approval); "
                    "baseline GET /healthz" if db == "sqlite" else ""),
        Figure(f"{db}.metrics_10k_waiting_p99", _p99(samples["metrics"]), "ms",
               _p99(samples["healthz"]),
               _p99(samples["metrics"]) / _p99(samples["healthz"]), "diagnostic"),
        Figure(f"{db}.state_at_10k_deep_p50", p50["state"], "ms", p50["page"],
               p50["state"] / p50["page"], f"value <= {STATE_TARGET_MS:g} ms",
               p50["state"] <= STATE_TARGET_MS,
               note=f"GET /runs/{{id}}/state?at= at {STATES} seqs past the middle of a "
                    f"run of {events:,} events; baseline GET {PAGE}" if db == "sqlite"
                    else ""),
        Figure(f"{db}.state_at_10k_vs_fold", p50["states_at"], "ms", p50["fold"],
               p50["states_at"] / p50["fold"], "diagnostic",
               note="in process: Journal.states_at against the fold from the first "
                    "event it replaced" if db == "sqlite" else ""),
    ]


def _listing_figures(small_url: str, big_url: str, db: str) -> list[Figure]:
    """The runs list and ``/metrics`` at ``BIG`` runs against ``SMALL``."""
    began = time.perf_counter()
    clients = {"small": uw.Client.connect(small_url), "big": uw.Client.connect(big_url)}
    try:
        _fill(small_url, SMALL, _LISTING)
        _fill(big_url, BIG, _LISTING)
        built = time.perf_counter() - began
        deep = {}
        for size, c in clients.items():
            cursor = None
            for _ in range(20):
                cursor = c.list_runs(tenant_id=TENANT, limit=50, cursor=cursor).next_cursor
            deep[size] = cursor
        calls: dict[str, Callable[[uw.Client, str], object]] = {
            "first": lambda c, s: c.list_runs(tenant_id=TENANT, limit=50),
            "status": lambda c, s: c.list_runs(tenant_id=TENANT, limit=50, status="failed"),
            "flow": lambda c, s: c.list_runs(tenant_id=TENANT, limit=50, flow="refunds"),
            "deep": lambda c, s: c.list_runs(tenant_id=TENANT, limit=50, cursor=deep[s]),
        }
        samples: dict[tuple[str, str], list[float]] = {}
        gc.collect()
        with ExitStack() as stack:
            http = {s: stack.enter_context(_served(c)) for s, c in clients.items()}
            for _ in range(3):
                for s in clients:
                    _ms(http[s], "/runs"), _ms(http[s], "/metrics")
            for _ in range(PAGES):
                for s, c in clients.items():
                    for name, call in calls.items():
                        samples.setdefault((name, s), []).append(
                            _timed(lambda call=call, c=c, s=s: call(c, s)))
                    samples.setdefault(("console", s), []).append(_ms(http[s], "/runs"))
                    samples.setdefault(("console_waiting", s), []).append(
                        _ms(http[s], "/runs?status=waiting"))
            for i in range(SCRAPES):
                for s in (("small", "big") if i % 2 else ("big", "small")):
                    samples.setdefault(("metrics", s), []).append(_ms(http[s], "/metrics"))
                    samples.setdefault(("counts", s), []).append(_cpu_ms(
                        lambda c=clients[s]: (c.store.run_counts(), c.store.request_counts())))
    finally:
        for c in clients.values():
            c.close()
    p50 = {k: median(v) for k, v in samples.items()}
    what = {
        "first": "client.list_runs (runs ls): the first page of 50",
        "status": "the first page of runs with status failed (1 in 10)",
        "flow": "the first page of runs of flow refunds (1 in 3)",
        "deep": "the page 20 pages down, by its cursor",
        "console": "the console's GET /runs (page, counts by status, labels, waiting)",
        "console_waiting": "the console's GET /runs?status=waiting",
    }
    figures = []
    for name, text in what.items():
        value, base = p50[(name, "big")], p50[(name, "small")]
        figures.append(Figure(
            f"{db}.runs_{name}_page_{BIG // 1000}k_vs_{SMALL // 1000}k", value, "ms", base,
            value / base, f"<= {FLAT}", value / base <= FLAT,
            note=f"{text}; {BIG:,} runs against {SMALL:,} (built in {built:.0f}s)"
            if db == "sqlite" or name == "first" else ""))
    value, base = p50[("metrics", "big")], p50[("metrics", "small")]
    figures.append(Figure(
        f"{db}.metrics_{BIG // 1000}k_runs_p50", value, "ms", base, value / base,
        f"<= {FLAT}", value / base <= FLAT,
        note="GET /metrics: sums the counts kept by the runs' triggers (migration 0027)"
        if db == "sqlite" else ""))
    value, base = p50[("counts", "big")], p50[("counts", "small")]
    figures.append(Figure(
        f"{db}.metrics_counts_{BIG // 1000}k_runs_cpu", value, "ms", base, value / base,
        "diagnostic", note="in process: the CPU time of the scrape's two reads "
                           "(run_counts, request_counts)" if db == "sqlite" else ""))
    return figures


def bench_sqlite() -> list[Figure]:
    """Observation on SQLite."""
    with sqlite_dir() as d:
        figures = _waiting_figures(f"sqlite:///{d}/waiting.db", "sqlite")
        figures += step_figures(f"sqlite:///{d}/with.db", f"sqlite:///{d}/without.db",
                                "sqlite")
        return figures + _listing_figures(f"sqlite:///{d}/small.db",
                                          f"sqlite:///{d}/big.db", "sqlite")


def bench_postgres() -> list[Figure]:
    """Observation on PostgreSQL."""
    with pg_schema() as (_, waiting):
        figures = _waiting_figures(waiting, "postgres")
    with pg_schema() as (_, with_counts), pg_schema() as (_, without):
        figures += step_figures(with_counts, without, "postgres")
    with pg_schema() as (_, small), pg_schema() as (_, big):
        return figures + _listing_figures(small, big, "postgres")
