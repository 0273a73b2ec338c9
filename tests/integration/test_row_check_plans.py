"""A worker's look at the runs rows written since its last look reads as many pages at
100,000 runs as at 5,000 (on SQLite: runs as many instructions). Both databases are filled
by SQL (``bench/many_runs.py``): runs written one millisecond apart, the newest of them
completed. The look's window holds the same 1,000 newest rows in both, found on the
runs_updated index (migration 0029); each completed one is probed for its end event. The
look at every row reads the whole table (it runs once a day); it is measured too, to show
the test can tell them apart.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from underway.store import connect
from underway.store.leases import MAX_LEASE_TTL

BENCH = str(Path(__file__).resolve().parents[2] / "bench")
if BENCH not in sys.path:
    sys.path.append(BENCH)

import many_runs  # noqa: E402
import query_plans  # noqa: E402

NOW = 1_800_000_000.0
SMALL = many_runs.Mix.scaled(5_000, now=NOW)
LARGE = many_runs.Mix.scaled(100_000, now=NOW)
WINDOW = 1_000
"""Rows in the incremental look's window: the newest, written a millisecond apart."""
SINCE = NOW - 60 - WINDOW * 0.001
FLAT = 1.5
"""The large database's pages over the small one's (B-trees a level deeper add a page a
probe: 4,112 pages against 3,091 here); the look at every row reads 5 times as many or
more (39,040 pages at 100,000 runs)."""


def _params(since: float | None) -> dict[str, Any]:
    params: dict[str, Any] = {"now": NOW, "horizon": NOW + MAX_LEASE_TTL, "limit": 100}
    return params if since is None else {**params, "since": since}


def _pages(url: str) -> dict[tuple[str, str], query_plans.Plan]:
    base, _, schema = url.partition("?schema=")
    found = {}
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        for name, since in (("suspect_runs_since", SINCE), ("suspect_runs", None)):
            for mode in query_plans.MODES:
                query_plans.explain(conn, name, _params(since), mode=mode)  # cache warmed
                found[(name, mode)] = query_plans.explain(conn, name, _params(since),
                                                          mode=mode)
    return found


@pytest.fixture
def large_pg_url(pg_url: str, pg_janitor: Any) -> Any:
    """Another fresh schema on the same server."""
    base, _, _ = pg_url.partition("?schema=")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield f"{base}?schema={schema}"
    pg_janitor.drop(f'DROP SCHEMA "{schema}" CASCADE')


def _filled(url: str, mix: many_runs.Mix) -> str:
    connect(url).close()
    many_runs.fill(url, mix)
    return url


@pytest.mark.postgres
def test_a_look_at_the_rows_written_since_reads_as_much_at_100k_runs_as_at_5k(
        pg_url: str, large_pg_url: str) -> None:
    small = _pages(_filled(pg_url, SMALL))
    large = _pages(_filled(large_pg_url, LARGE))
    for mode in query_plans.MODES:
        plan, base = large[("suspect_runs_since", mode)], small[("suspect_runs_since", mode)]
        where = f"{mode}: {plan.pages} pages against {base.pages}\n{plan.text()}"
        assert "runs_updated" in plan.indexes(), where
        assert "runs" not in plan.scans(), where
        assert plan.pages <= base.pages * FLAT, where
        # The window's rows are read once each, whatever the table's size.
        assert all(int(n["Actual Rows"]) * int(n["Actual Loops"]) <= WINDOW * 1.1
                   for n in query_plans.nodes_of(plan.tree)
                   if n.get("Relation Name") == "runs"), where
        full = large[("suspect_runs", mode)]
        assert full.pages >= 5 * plan.pages, f"{full.pages} against {plan.pages}"


def _sqlite_steps(url: str, since: float | None) -> int:
    """SQLite virtual-machine instructions of one look (``since`` None: every row)."""
    store: Any = connect(url)
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(tick, 10)
    try:
        store.suspect_runs(now=NOW, since=since)
    finally:
        store._conn.set_progress_handler(None, 0)
        store.close()
    return steps[0] * 10


def test_a_sqlite_look_at_the_rows_written_since_costs_as_much_at_100k_runs_as_at_5k(
        tmp_path: Path) -> None:
    cost = {}
    for mix in (SMALL, LARGE):
        url = _filled(f"sqlite:///{tmp_path}/{mix.runs}.db", mix)
        cost[mix.runs] = (_sqlite_steps(url, SINCE), _sqlite_steps(url, None))
    (small, _), (large, full) = cost[SMALL.runs], cost[LARGE.runs]
    assert large <= small * FLAT, cost
    assert full >= 5 * large, cost
