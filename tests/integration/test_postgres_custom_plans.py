"""Every connection of a PostgreSQL store plans each statement for its own values.

psycopg prepares a statement after a few uses, and PostgreSQL may then keep one generic
plan for any values. With statistics, the generic plan of a run's journal tail after a
checkpoint was a parallel scan of the run's whole journal, 78 times slower than the plan
for the values given (bench/README.md, long runs)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from underway.store import connect

pytestmark = pytest.mark.postgres


def test_every_connection_of_the_pool_plans_for_its_values(pg_url: str) -> None:
    store: Any = connect(pg_url)
    try:
        held = threading.Barrier(2)
        modes: list[str] = []

        def read() -> None:
            with store._pool.connection() as conn:
                held.wait(timeout=60)  # both connections open at once: two of the pool
                modes.append(conn.execute("SHOW plan_cache_mode").fetchone()[0])
                held.wait(timeout=60)

        threads = [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert modes == ["force_custom_plan", "force_custom_plan"]
    finally:
        store.close()
