"""Finding runs by label at 10,000 runs: a page filtered by one label and by two, and a
page with each run's labels (what the console's runs list reads), against the first page
of the plain listing, the baseline, measured in the same run.

``RUNS`` runs of one tenant (and as many of another) are started with three labels each:
``sku`` (one of 200 values), ``warehouse`` (one of 5) and ``qty``. One ``sku`` matches about
50 runs of the tenant: a page. With the (tenant, name, value) index a label filter reads
the matching index entries, not every run; the labels of a page are one indexed query.
"""

from __future__ import annotations

import time

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir

RUNS = 10_000
PAGE = 50
SKUS = 200
T0 = 1_717_200_000.0
TARGETS = {"label_filter": 5.0, "two_label_filter": 10.0, "page_with_labels": 4.0}
"""The most each may cost, as a ratio of a plain page. A filtered page reads the index,
then sorts its matches by time: a few plain pages, never a scan of the tenant's runs (a
scan is over 100 times a plain page here). Two labels read the runs of the rarer one and
check each for the other."""


def _fill(client: uw.Client, clock: uw.ManualClock) -> None:
    for i in range(RUNS):
        for tenant in ("acme", "globex"):
            client.start("orders", {"n": i}, tenant_id=tenant, run_id=f"r{i:06d}", labels={
                "sku": f"SKU-{i % SKUS:03d}", "warehouse": f"W{i % 5}", "qty": i % 97})
        if i % 3 == 2:
            clock.advance(1)


def _timed(fn: object, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - began)
    return out


def _figures(client: uw.Client, db: str, *, reps: int = 9) -> list[Figure]:
    def plain() -> None:
        assert len(client.list_runs(tenant_id="acme", limit=PAGE).runs) == PAGE

    def one_label() -> None:
        found = client.list_runs(tenant_id="acme", limit=PAGE, labels={"sku": "SKU-007"})
        assert len(found.runs) == PAGE

    def two_labels() -> None:
        found = client.list_runs(tenant_id="acme", limit=PAGE,
                                 labels={"sku": "SKU-007", "warehouse": "W2"})
        assert len(found.runs) == PAGE

    def with_labels() -> None:
        page = client.list_runs(tenant_id="acme", limit=PAGE)
        labels = client.run_labels([r.run_id for r in page.runs], tenant_id="acme")
        assert len(labels) == PAGE

    base = median(_timed(plain, reps)) * 1e3
    figures = []
    for name, fn in (("label_filter", one_label), ("two_label_filter", two_labels),
                     ("page_with_labels", with_labels)):
        value = median(_timed(fn, reps)) * 1e3
        ratio = value / base
        figures.append(Figure(f"{db}.{name}", value, "ms", base, ratio,
                              f"<= {TARGETS[name]}", ratio <= TARGETS[name],
                              note=f"{RUNS:,} labelled runs of the tenant, pages of {PAGE}"))
    return figures


def bench_sqlite() -> list[Figure]:
    """Filtered pages and a page's labels on SQLite."""
    with sqlite_dir() as d:
        clock = uw.ManualClock(T0)
        client = uw.Client.connect(f"sqlite:///{d}/labels.db", clock=clock)
        try:
            _fill(client, clock)
            return _figures(client, "sqlite")
        finally:
            client.close()


def _analyze(url: str, schema: str) -> None:
    """Gather the planner's statistics now, as autovacuum does soon after a bulk insert."""
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".runs')
        conn.execute(f'ANALYZE "{schema}".run_labels')


def bench_postgres() -> list[Figure]:
    """Filtered pages and a page's labels on PostgreSQL."""
    with pg_schema() as (schema, url):
        clock = uw.ManualClock(T0)
        client = uw.Client.connect(url, clock=clock)
        try:
            _fill(client, clock)
            _analyze(url, schema)
            return _figures(client, "postgres")
        finally:
            client.close()
