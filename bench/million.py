"""A million runs in one database: claims, the next timer, and a worker's memory.

* **Claims at 1M against 10k runs.** Two databases of the issue's mix, filled by SQL
  (``many_runs.py``): a tenth of the runs asleep on timers, a hundredth ready, 50 in
  flight, the rest completed; ``BIG`` runs (1,000,000 unless
  ``UNDERWAY_BENCH_MILLION_RUNS`` says otherwise) against ``SMALL``. The figure is the
  pages a claim of 10 reads (PostgreSQL ``EXPLAIN (ANALYZE, BUFFERS)``, as the store
  prepares the statement, custom and generic plans) and the SQLite virtual machine's
  instructions; its time is a diagnostic.
* **The row check at 1M against 10k runs**: the pages (and SQLite instructions) of a
  worker's look at the rows written since its last look, the 1,000 newest in both.
* **A worker's memory per waiting run**: the resident set of one ``underway worker``
  serving a database of ``WAITING_BIG`` runs asleep on timers, against one of
  ``WAITING_SMALL``. A waiting run is a row; the worker never reads it until it is due.

PostgreSQL is analysed and vacuumed after each fill, as autovacuum does soon after.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import psycopg

import many_runs
import query_plans
from common import Figure, median, pg_schema, sqlite_dir
from underway.store import connect, limits
from underway.store.leases import MAX_LEASE_TTL
from workers import Workers

BIG = int(os.environ.get("UNDERWAY_BENCH_MILLION_RUNS", "1000000"))
"""Runs of the big database (``UNDERWAY_BENCH_MILLION_RUNS`` for a quick try)."""
SMALL = 10_000
WAITING_SMALL = 10_000
WAITING_BIG = 100_000
LIMIT = 10
SMALL_READY = 2 * limits.window(LIMIT) * many_runs.TENANTS
"""Ready runs of the small database: more than a claim reads (the issue's hundredth of
10,000 is fewer, and a claim that finds fewer candidates than it reads costs less)."""
NOW = 1_800_000_000.0
FLAT = 1.5
"""The big database's cost over the small one's. Its B-trees are a level deeper: a page
more for each probe and for each index entry a lease writes (13 indexes a run)."""
ROWS_SINCE = NOW - 61.0
"""A worker's look at the rows written since: the 1,000 newest (written a millisecond
apart), in both databases."""
REPS = 15
SETTLE_S = 3.0
"""Seconds a worker serves the waiting runs before its memory is read: a few rounds of
looking for work, its row check and its listening connection."""


def _params() -> dict[str, dict[str, Any]]:
    claim = {"now": NOW, "queues": None, "tenant_id": None, "run_id": None, "full": [],
             "empty_queues": [], "empty_tenants": [], "limit": LIMIT,
             "window": limits.window(LIMIT)}
    return {
        "claim_unlimited": {**claim, "owner": "w", "expires_at": NOW + 60},
        "claim_candidates": claim,
        "next_due_at": {"now": NOW, "queues": None},
        "suspect_runs_since": {"now": NOW, "horizon": NOW + MAX_LEASE_TTL, "limit": 100,
                               "since": ROWS_SINCE},
    }


def _small() -> many_runs.Mix:
    return many_runs.Mix(runs=SMALL, waiting=SMALL // 10, ready=SMALL_READY, now=NOW)


def _pg_costs(url: str) -> dict[str, tuple[int, float]]:
    """(pages, median executor ms) of each query and plan mode on the database."""
    base, _, schema = url.partition("?schema=")
    out = {}
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        for name, params in _params().items():
            for mode in query_plans.MODES:
                plans = [query_plans.explain(conn, name, params, mode=mode)
                         for _ in range(REPS)]
                out[f"{name}_{mode.removeprefix('force_').removesuffix('_plan')}"] = (
                    plans[-1].pages, median([p.ms for p in plans[1:]]))
    return out


def _sqlite_costs(url: str) -> dict[str, tuple[int, float]]:
    """(VM instructions, median ms) of a claim of ``LIMIT`` and of the next due time."""
    store: Any = connect(url)
    try:
        out = {}
        calls: dict[str, Callable[[], object]] = {
            "claim": lambda: store.claim(owner="w", now=NOW, ttl=60, limit=LIMIT),
            "next_due_at": lambda: store.next_due_at(now=NOW),
            "suspect_runs_since": lambda: store.suspect_runs(now=NOW, since=ROWS_SINCE),
        }
        conn: sqlite3.Connection = store._conn
        for name, call in calls.items():
            steps, times = [0], []
            for _ in range(REPS):
                steps[0] = 0

                def tick(steps: list[int] = steps) -> int:
                    steps[0] += 1
                    return 0

                conn.set_progress_handler(tick, 10)
                began = time.perf_counter()
                try:
                    got = call()
                finally:
                    times.append((time.perf_counter() - began) * 1e3)
                    conn.set_progress_handler(None, 0)
                for lease in got if isinstance(got, list) else []:
                    store.release(lease)  # due again: every claim finds the same
            out[name] = (steps[0] * 10, median(times[1:]))
        return out
    finally:
        store.close()


def _claim_figures(db: str, small: dict[str, tuple[int, float]],
                   big: dict[str, tuple[int, float]], built: float) -> list[Figure]:
    unit = "pages" if db == "postgres" else "VM instructions"
    figures = []
    for name, (count, ms) in big.items():
        base, base_ms = small[name]
        figures.append(Figure(
            f"{db}.million_{name}_{unit.split()[-1]}", count, unit, base, count / base,
            f"<= {FLAT}", count / base <= FLAT,
            note=(f"{BIG:,} runs against {SMALL:,} (the issue's mix; big one built in "
                  f"{built:.0f}s); a claim of {LIMIT}, read as the store sends it"
                  if name.startswith("claim") and name.endswith(("custom", "claim")) else "")))
        figures.append(Figure(f"{db}.million_{name}_ms", ms, "ms", base_ms, ms / base_ms,
                              "diagnostic"))
    return figures


def _rss_mib(db: str, url: str, waiting: int) -> float:
    """One worker's resident set once it has served ``waiting`` sleeping runs a while."""
    connect(url).close()
    many_runs.fill(url, many_runs.Mix(runs=waiting, waiting=waiting, ready=0, now=time.time(),
                                      in_flight=0, timers_from=86_400.0, timer_every=0.1))
    with Workers(url, 1, "--concurrency", "100") as w:
        time.sleep(SETTLE_S)
        rss = w.rss_kb() / 1024
    leased = _touched(url)
    if leased:
        raise RuntimeError(f"the worker took {leased} runs that were not due ({db})")
    return rss


def _touched(url: str) -> int:
    """Runs whose lease changed since the fill (all were asleep with token 1)."""
    query = "SELECT count(*) FROM runs WHERE lease_token <> 1 OR lease_owner IS NOT NULL"
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return int(db.execute(query).fetchone()[0])
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        row = conn.execute(query).fetchone()
        return 0 if row is None else int(row[0])


def _rss_figures(db: str, small: float, big: float) -> list[Figure]:
    return [Figure(
        f"{db}.worker_rss_{WAITING_BIG // 1000}k_vs_{WAITING_SMALL // 1000}k_waiting", big,
        "MiB", small, big / small, f"<= {FLAT}", big / small <= FLAT,
        note=f"VmRSS of one worker serving {WAITING_BIG:,} runs asleep on timers (rows "
             f"filled by SQL) against {WAITING_SMALL:,}" if db == "postgres" else "")]


def bench_postgres() -> list[Figure]:
    """Claims and the next due time at BIG runs against SMALL, and a worker's memory."""
    with pg_schema() as (_, small_url), pg_schema() as (_, big_url):
        for url in (small_url, big_url):
            connect(url).close()
        many_runs.fill(small_url, _small())
        began = time.perf_counter()
        many_runs.fill(big_url, many_runs.Mix.scaled(BIG, now=NOW))
        built = time.perf_counter() - began
        figures = _claim_figures("postgres", _pg_costs(small_url), _pg_costs(big_url), built)
    with pg_schema() as (_, small_url), pg_schema() as (_, big_url):
        small_rss = _rss_mib("postgres", small_url, WAITING_SMALL)
        big_rss = _rss_mib("postgres", big_url, WAITING_BIG)
    return figures + _rss_figures("postgres", small_rss, big_rss)


def bench_sqlite() -> list[Figure]:
    """The same on SQLite."""
    with sqlite_dir() as d:
        small_url, big_url = f"sqlite:///{d}/small.db", f"sqlite:///{d}/big.db"
        for url in (small_url, big_url):
            connect(url).close()
        many_runs.fill(small_url, _small())
        began = time.perf_counter()
        many_runs.fill(big_url, many_runs.Mix.scaled(BIG, now=NOW))
        built = time.perf_counter() - began
        figures = _claim_figures("sqlite", _sqlite_costs(small_url), _sqlite_costs(big_url),
                                 built)
        small_rss = _rss_mib("sqlite", f"sqlite:///{d}/w_small.db", WAITING_SMALL)
        big_rss = _rss_mib("sqlite", f"sqlite:///{d}/w_big.db", WAITING_BIG)
    return figures + _rss_figures("sqlite", small_rss, big_rss)


if __name__ == "__main__":
    import sys

    for fig in (bench_sqlite() if sys.argv[1:] == ["sqlite"] else bench_postgres()):
        print(fig)
