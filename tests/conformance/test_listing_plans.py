"""Every listing the runs list offers (all runs, by status, by flow, by both; first page
and a page after a cursor) reads an index in the listing's order and stops at the page:
the database's plan uses the index, with no scan of the table and no sort. So a page costs
the same at a million runs as at ten thousand. The counts above the console's list and the
requests ``/metrics`` counts read indexes too. On SQLite and PostgreSQL, with 20,000 runs
of the tenant inserted in one statement and the planner's statistics gathered."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from store_backends import Backend

from underway.store import Store
from underway.store.queries import load

ROWS = 20_000
INF = float("inf")

_SQLITE = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < 20000)
INSERT INTO runs (tenant_id, run_id, flow, status, step, last_seq, last_hash, created_at,
                  updated_at, request_kind)
SELECT CASE WHEN (i / 10) % 2 = 0 THEN 'acme' ELSE 'globex' END, printf('r%08d', i),
       CASE i % 3 WHEN 0 THEN 'invoices' WHEN 1 THEN 'refunds' ELSE 'triage' END,
       CASE WHEN i % 10 < 6 THEN 'completed' WHEN i % 10 < 9 THEN 'waiting' ELSE 'failed' END,
       's', 1, 'h', 1.7e9 + i, 1.7e9 + i,
       CASE WHEN i % 10 = 8 THEN 'approval' END
  FROM n
"""
_PG = """
INSERT INTO runs (tenant_id, run_id, flow, status, step, last_seq, last_hash, created_at,
                  updated_at, request_kind)
SELECT CASE WHEN (i / 10) % 2 = 0 THEN 'acme' ELSE 'globex' END, 'r' || lpad(i::text, 8, '0'),
       CASE i % 3 WHEN 0 THEN 'invoices' WHEN 1 THEN 'refunds' ELSE 'triage' END,
       CASE WHEN i % 10 < 6 THEN 'completed' WHEN i % 10 < 9 THEN 'waiting' ELSE 'failed' END,
       's', 1, 'h', 1.7e9 + i, 1.7e9 + i,
       CASE WHEN i % 10 = 8 THEN 'approval' END
  FROM generate_series(0, 19999) AS i
"""

LISTINGS = {
    "list_runs": {},
    "list_runs_by_status": {"status": "failed"},
    "list_runs_by_flow": {"flow": "refunds"},
    "list_runs_by_flow_status": {"flow": "refunds", "status": "waiting"},
}
"""Each listing query and the filter it serves."""
INDEXES = {"list_runs": "runs_listing", "list_runs_by_status": "runs_listing_status",
           "list_runs_by_flow": "runs_listing_flow",
           "list_runs_by_flow_status": "runs_listing_flow_status"}


def params(filters: dict[str, str], cursor: tuple[float, str] | None) -> dict[str, Any]:
    """The parameters the store binds for a page (as ``SQLJournal.list_runs`` does)."""
    return {"tenant_id": "acme", "status": None, "flow": None, "since": -INF, "until": INF,
            "after_at": cursor[0] if cursor else INF, "after_id": cursor[1] if cursor else "",
            "prefix": None, "updated_since": None, "updated_until": None, "search": None,
            "limit": 50, **filters}


class Planner:
    """EXPLAIN on the backend's own database."""

    def __init__(self, backend: Backend) -> None:
        assert backend.url is not None
        self.dialect = backend.dialect
        self.url = backend.url

    def fill(self) -> None:
        if self.dialect == "sqlite":
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
                conn.execute(_SQLITE)
                conn.execute("ANALYZE")
            return
        import psycopg

        base, _, schema = self.url.partition("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute(_PG.encode())
            conn.execute("VACUUM ANALYZE runs")

    def plan(self, name: str, values: dict[str, Any]) -> str:
        """The plan of the named query, as text."""
        sql = load(self.dialect)[name]
        if self.dialect == "sqlite":
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
                rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", values).fetchall()
            return "\n".join(str(r[-1]) for r in rows)
        import psycopg

        base, _, schema = self.url.partition("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            found = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}".encode(), values).fetchone()
        assert found is not None
        return json.dumps(found[0])


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh database of each SQL kind: a plan is theirs (the suite's own ``backend``
    also gives the in-memory stores)."""
    b = Backend(request.param, request.getfixturevalue(f"{request.param}_url"
                                                       if request.param == "sqlite"
                                                       else "pg_url"))
    yield b
    b.close()


@pytest.fixture
def planner(backend: Backend, store: Store) -> Iterator[Planner]:
    p = Planner(backend)
    p.fill()
    yield p


@pytest.mark.parametrize("cursor", [None, (1.7e9 + 9_000, "r00009000")],
                         ids=["first_page", "after_cursor"])
@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_a_listing_reads_its_index_in_order(
    planner: Planner, name: str, cursor: tuple[float, str] | None,
) -> None:
    plan = planner.plan(name, params(LISTINGS[name], cursor))
    index = INDEXES[name]
    if planner.dialect == "sqlite":
        assert f"USING INDEX {index} " in plan or f"USING COVERING INDEX {index} " in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort
        assert "SCAN runs\n" not in plan + "\n", plan
    else:
        nodes = json.loads(plan)[0]["Plan"]
        kinds = _node_types(nodes)
        assert "Sort" not in kinds and "Incremental Sort" not in kinds, plan
        assert "Seq Scan" not in kinds, plan
        assert f'"Index Name": "{index}"' in plan, plan


def _node_types(node: dict[str, Any]) -> list[str]:
    return [node["Node Type"], *(t for c in node.get("Plans", []) for t in _node_types(c))]


def test_the_pages_follow_on_in_order_under_every_filter(
    planner: Planner, store: Store,
) -> None:
    for filters in LISTINGS.values():
        want = sorted((r for r in _all_rows(store, filters)), key=lambda r: (-r[0], r[1]))
        got: list[tuple[float, str]] = []
        after = None
        while True:
            page = store.list_runs("acme", limit=500, after=after, **filters)  # type: ignore[arg-type]
            got += [(r.created_at, r.run_id) for r in page]
            if len(page) < 500:
                break
            after = (page[-1].created_at, page[-1].run_id)
        assert got == want, filters


def _all_rows(store: Store, filters: dict[str, str]) -> list[tuple[float, str]]:
    """Every matching run of acme, from the rows the test inserted (ten runs of a tenant,
    then ten of the other; statuses and flows by the run's number)."""
    out = []
    for i in (i for i in range(ROWS) if (i // 10) % 2 == 0):
        status = "completed" if i % 10 < 6 else "waiting" if i % 10 < 9 else "failed"
        flow = ("invoices", "refunds", "triage")[i % 3]
        if filters.get("status", status) == status and filters.get("flow", flow) == flow:
            out.append((1.7e9 + i, f"r{i:08d}"))
    return out


def test_counts_read_indexes(planner: Planner, store: Store) -> None:
    status = planner.plan("status_counts", {
        "tenant_id": "acme", "cap": 1000,
        "statuses": json.dumps(["completed", "waiting"]) if planner.dialect == "sqlite"
        else ["completed", "waiting"]})
    requests = planner.plan("request_counts", {})
    runs = planner.plan("run_counts", {})
    # /metrics reads the counts the runs' triggers keep (migration 0027), never the runs.
    assert "run_counts" in requests and "runs" not in requests.replace("run_counts", ""), \
        requests
    assert "run_counts" in runs and "runs" not in runs.replace("run_counts", ""), runs
    if planner.dialect == "sqlite":
        assert "runs_listing_status" in status, status
    else:
        assert "Seq Scan" not in status and "runs_listing_status" in status, status
    assert store.status_counts("acme", ["completed", "waiting", "failed", "dead"], cap=1000) \
        == {"completed": 1000, "waiting": 1000, "failed": 1000, "dead": 0}
    assert store.status_counts("acme", ["failed"], cap=5000) == {"failed": 1000}
    assert store.request_counts() == [("acme", "approval", 1000), ("globex", "approval", 1000)]
