"""Listing a tenant's runs as they pile up: a page deep in the list against the first one.

``RUNS`` runs of one tenant (and as many of another) are started by name through the client
(one clock tick per three runs, so created_at ties are common and the cursor's run-id
tie-break is exercised). The baseline is the first page of ``PAGE`` runs, newest first; the
figure is a page ``DEPTH`` pages down, reached by its cursor. With the listing index both
read ``PAGE`` index entries from where the cursor points, so the deep page costs about what
the first one does; without it a deep page scans (or sorts) everything newer.
"""

from __future__ import annotations

import time

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir

RUNS = 6_000
PAGE = 50
DEPTH = 100
T0 = 1_717_200_000.0


def _fill(client: uw.Client, clock: uw.ManualClock) -> None:
    for i in range(RUNS):
        for tenant in ("acme", "globex"):
            client.start("invoices", {"n": i}, tenant_id=tenant, run_id=f"r{i:06d}")
        if i % 3 == 2:
            clock.advance(1)


def _figures(client: uw.Client, db: str, *, reps: int = 7) -> list[Figure]:
    cursor: str | None = None
    for _ in range(DEPTH):
        cursor = client.list_runs(tenant_id="acme", limit=PAGE, cursor=cursor).next_cursor
    assert cursor is not None
    first_s, deep_s = [], []
    for _ in range(reps):
        began = time.perf_counter()
        first = client.list_runs(tenant_id="acme", limit=PAGE)
        first_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        deep = client.list_runs(tenant_id="acme", limit=PAGE, cursor=cursor)
        deep_s.append(time.perf_counter() - began)
        assert len(first.runs) == len(deep.runs) == PAGE
    base, value = median(first_s) * 1e3, median(deep_s) * 1e3
    ratio = value / base
    return [Figure(f"{db}.run_page_{DEPTH}_deep", value, "ms", base, ratio, "<= 2.0",
                   ratio <= 2.0, note=f"{RUNS:,} runs of the tenant, pages of {PAGE}")]


def bench_sqlite() -> list[Figure]:
    """Deep and first pages on SQLite."""
    with sqlite_dir() as d:
        clock = uw.ManualClock(T0)
        client = uw.Client.connect(f"sqlite:///{d}/listing.db", clock=clock)
        try:
            _fill(client, clock)
            return _figures(client, "sqlite")
        finally:
            client.close()


def _analyze(url: str, schema: str) -> None:
    """Gather the planner's statistics now, as autovacuum does within a minute of a bulk
    insert: a table planned on the statistics of its empty self is not the steady state."""
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".runs')


def bench_postgres() -> list[Figure]:
    """Deep and first pages on PostgreSQL."""
    with pg_schema() as (schema, url):
        clock = uw.ManualClock(T0)
        client = uw.Client.connect(url, clock=clock)
        try:
            _fill(client, clock)
            _analyze(url, schema)
            return _figures(client, "postgres")
        finally:
            client.close()
