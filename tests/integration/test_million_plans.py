"""Claiming, and finding the next timer due, read as many pages at 100,000 runs as at 2,000.
A claim on queues without limits is one statement (``claim_unlimited``); on limited queues
it is ``claim_candidates`` within a transaction. Both are checked.

Both databases hold the issue's shapes, filled by SQL (``bench/many_runs.py``): completed
runs, runs asleep on timers, ready runs and a few in flight, over eight tenants. The large
one has a backlog of 10,000 ready runs, against 200; every claim must still read only the
candidates it takes. Each query is executed as the store prepares it, under a custom and
a generic plan, with the planner's statistics gathered. As a join, the claim hashed every
due run of the table (and, on a generic plan, probed and locked every candidate before
sorting them): 2.4 times the small database's pages. SQLite's claim is counted in the
virtual machine's instructions.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from underway.store import connect, limits

BENCH = str(Path(__file__).resolve().parents[2] / "bench")
if BENCH not in sys.path:
    sys.path.append(BENCH)

import many_runs  # noqa: E402
import query_plans  # noqa: E402

NOW = 1_800_000_000.0
LIMIT = 10
SMALL = many_runs.Mix(runs=2_000, waiting=200, ready=200, now=NOW)
LARGE = many_runs.Mix(runs=100_000, waiting=10_000, ready=10_000, now=NOW)
FLAT = 1.5
"""The large database's pages over the small one's. Its B-trees are a level deeper, which
adds a page to each probe (132 pages against 173 here); a read that grows with the table
or the backlog goes far past it (the join: 3.4 times)."""


def _params() -> dict[str, dict[str, Any]]:
    """Each query as a worker serving every queue sends it."""
    return {
        "claim_candidates": {
            "now": NOW, "queues": None, "tenant_id": None, "run_id": None, "full": [],
            "empty_queues": [], "empty_tenants": [], "limit": LIMIT,
            "window": limits.window(LIMIT)},
        "claim_unlimited": {
            "owner": "w", "expires_at": NOW + 60, "now": NOW, "queues": None,
            "tenant_id": None, "run_id": None, "full": [], "empty_queues": [],
            "empty_tenants": [], "limit": LIMIT, "window": limits.window(LIMIT)},
        "next_due_at": {"now": NOW, "queues": None},
        "claim_run": {"owner": "w", "expires_at": NOW + 60, "now": NOW, "queues": None,
                      "tenant_id": "tenant-3", "run_id": "run-3"},
        "leased_per_queue": {"now": NOW, "queues": ["default"]},
    }


def _filled(url: str, mix: many_runs.Mix) -> str:
    connect(url).close()
    many_runs.fill(url, mix)
    return url


def _plans(url: str) -> dict[tuple[str, str], query_plans.Plan]:
    base, _, schema = url.partition("?schema=")
    found = {}
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        for name, params in _params().items():
            for mode in query_plans.MODES:
                query_plans.explain(conn, name, params, mode=mode)  # the cache warmed
                found[(name, mode)] = query_plans.explain(conn, name, params, mode=mode)
    return found


@pytest.fixture
def second_pg_url(pg_url: str, pg_janitor: Any) -> Any:
    """Another fresh schema on the same server."""
    base, _, _ = pg_url.partition("?schema=")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield f"{base}?schema={schema}"
    pg_janitor.drop(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.mark.postgres
def test_claims_and_timers_read_as_much_at_100k_runs_as_at_2k(
        pg_url: str, second_pg_url: str) -> None:
    small = _plans(_filled(pg_url, SMALL))
    large = _plans(_filled(second_pg_url, LARGE))
    for (name, mode), plan in large.items():
        base = small[(name, mode)]
        where = f"{name} ({mode}): {plan.pages} pages against {base.pages}\n{plan.text()}"
        assert "runs" not in plan.scans(), where  # (the queues table has a row a queue)
        # The runs in flight (as many in both) are read a page at a time or row by row.
        assert plan.pages <= base.pages * FLAT + many_runs.IN_FLIGHT // 2, where
    for (name, mode) in [(n, m) for n in ("claim_candidates", "claim_unlimited")
                         for m in query_plans.MODES]:
        claim = large[(name, mode)]
        # The due runs are read per tenant on a wake-time index; the runs taken are
        # probed on the primary key, in order, only until the claim has its runs.
        assert {"runs_fair", "runs_due"} & set(claim.indexes()), claim.text()
        probes = [n for n in query_plans.nodes_of(claim.tree)
                  if n.get("Index Name") == "runs_pkey"]
        assert probes and all(int(n["Actual Loops"]) <= LIMIT for n in probes), claim.text()
        # No read of the table yields more rows than the candidates and the runs in
        # flight (the old join hashed all 10,000 due runs).
        most = limits.window(LIMIT) * many_runs.TENANTS + many_runs.IN_FLIGHT
        assert all(int(n["Actual Rows"]) * int(n["Actual Loops"]) <= most
                   for n in query_plans.nodes_of(claim.tree)
                   if n.get("Relation Name") == "runs"), claim.text()
    for mode in query_plans.MODES:
        assert large[("next_due_at", mode)].pages <= 5, large[("next_due_at", mode)].text()


@pytest.mark.postgres
def test_a_claim_on_a_large_table_takes_the_oldest_due_runs_of_every_tenant(
        pg_url: str) -> None:
    _filled(pg_url, LARGE)
    store = connect(pg_url)
    try:
        leases = store.claim(owner="w", now=NOW, ttl=60, limit=LIMIT)
        assert len({(x.tenant_id, x.run_id) for x in leases}) == LIMIT
        rows = [store.get_run(x.tenant_id, x.run_id) for x in leases]
        assert all(r is not None and r.status == "ready" and r.lease_owner == "w"
                   for r in rows)
        # Every tenant's first turn comes before any tenant's second: the eight tenants
        # are all served, and no tenant holds more than two of the ten.
        tenants = [x.tenant_id for x in leases]
        assert len(set(tenants)) == many_runs.TENANTS
        assert max(tenants.count(t) for t in tenants) <= 2
        # The oldest due runs: run i of the ready ones was due before run i + 1.
        assert sorted(int(x.run_id.removeprefix("run-")) for x in leases)[0] < 2 * LIMIT
        assert store.next_due_at(now=NOW) is not None
    finally:
        store.close()


def _sqlite_steps(store: Any, fn: Any) -> int:
    """SQLite virtual-machine instructions ``fn`` makes the store's connection run."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    store._conn.set_progress_handler(tick, 10)
    try:
        fn()
    finally:
        store._conn.set_progress_handler(None, 0)
    return steps[0] * 10


def test_a_sqlite_claim_costs_as_much_at_100k_runs_as_at_2k(tmp_path: Path) -> None:
    cost = {}
    for mix in (SMALL, LARGE):
        url = f"sqlite:///{tmp_path}/{mix.runs}.db"
        store = connect(_filled(url, mix))
        try:
            got: list[Any] = []
            claim = _sqlite_steps(store, lambda s=store, got=got: got.extend(
                s.claim(owner="w", now=NOW, ttl=60, limit=LIMIT)))
            due = _sqlite_steps(store, lambda s=store: s.next_due_at(now=NOW))
            assert len(got) == LIMIT
            cost[mix.runs] = (claim, due)
        finally:
            store.close()
    (small_claim, small_due), (large_claim, large_due) = cost[SMALL.runs], cost[LARGE.runs]
    assert large_claim <= small_claim * FLAT, cost
    assert large_due <= small_due * FLAT, cost
