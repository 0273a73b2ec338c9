"""A run's journal tail is read on the events' primary key on PostgreSQL, whatever the
statistics say of the table's other journals.

The planner takes ``seq`` and ``run_id`` to be independent. Where another run's journal is
longer, it guesses that a large share of this run's events lie past a checkpoint near its
head. Without a LIMIT it then scanned the whole table, in parallel, to return one row (60
to 78 times a young run's load in ``bench/long_runs.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from underway.store import connect
from underway.store.journal import EVENT_PAGE
from underway.store.queries import load

pytestmark = pytest.mark.postgres


def nodes(plan: Any) -> list[str]:
    """Every node type of an EXPLAIN (FORMAT JSON) plan."""
    found = [plan["Node Type"]]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def misleading(conn: Any) -> None:
    """Raw rows (a plan test): a young run of 20,000 events beside one of 300,000, each with
    a checkpoint at its last event, and statistics."""
    for run, n in (("young", 20_000), ("old", 300_000)):
        conn.execute(
            "INSERT INTO events (tenant_id, run_id, seq, type, payload, hash) "
            "SELECT 't1', %s, i, 'StepCompleted', '\\x7b7d'::bytea, "
            "sha256(int8send(i)) FROM generate_series(1, %s) AS i", (run, n))
        conn.execute("INSERT INTO checkpoints (tenant_id, run_id, seq, state) "
                     "VALUES ('t1', %s, %s, '\\x7b7d')", (run, n))
    conn.execute("ANALYZE")


def test_the_tail_after_a_late_checkpoint_is_an_index_range(pg_url: str) -> None:
    store: Any = connect(pg_url)
    try:
        with store._pool.connection() as conn:
            misleading(conn)
            query = load("postgres")["load_events"]
            params = {"tenant_id": "t1", "run_id": "young", "after_seq": 19_999,
                      "page": EVENT_PAGE}
            [[plan]] = conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchall()
            # The same query without its LIMIT: what the statistics alone lead to.
            bare = query[:query.rindex("LIMIT")]
            [[unbounded]] = conn.execute("EXPLAIN (FORMAT JSON) " + bare, params).fetchall()
        used = nodes(plan[0]["Plan"])
        assert "Index Scan" in used, json.dumps(plan)
        assert not {"Seq Scan", "Bitmap Heap Scan", "Sort"} & set(used), json.dumps(plan)
        # Unbounded, the guess of many rows makes a plan that gathers, then sorts them.
        assert "Sort" in nodes(unbounded[0]["Plan"]), "the data no longer misleads"
        assert [e.seq for e in store.load_events("t1", "young", after_seq=19_997)] == [
            19_998, 19_999, 20_000]
    finally:
        store.close()


def test_the_tails_of_many_runs_are_index_ranges(pg_url: str) -> None:
    store: Any = connect(pg_url)
    try:
        with store._pool.connection() as conn:
            misleading(conn)
            query = load("postgres")["checkpoints_with_tails"]
            [[plan]] = conn.execute("EXPLAIN (FORMAT JSON) " + query,
                                    {"tenant_id": "t1", "runs": ["young"]}).fetchall()
        used = nodes(plan[0]["Plan"])
        # Not a scan or hash of the tenant's whole journal: each tail an index range.
        assert "Index Scan" in used, json.dumps(plan)
        assert not {"Hash Join", "Gather Merge", "Gather"} & set(used), json.dumps(plan)
        assert "Seq Scan" not in nodes(_on_events(plan[0]["Plan"])), json.dumps(plan)
        found = store.load_checkpoints("t1", ["young"])["young"]
        assert found.seq == 20_000 and [e.seq for e in found.tail] == [20_000]
    finally:
        store.close()


def _on_events(plan: Any) -> Any:
    """The part of the plan that reads ``events``."""
    if plan.get("Relation Name") == "events":
        return plan
    for child in plan.get("Plans", []):
        found = _on_events(child)
        if found is not None and found.get("Relation Name") == "events":
            return found
    return {"Node Type": "none"}
