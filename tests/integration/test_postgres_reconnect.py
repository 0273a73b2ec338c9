"""A pooled PostgreSQL connection whose server went away is replaced before it is used.

A restart or a failover (docs/high-availability.md) ends every session on the server. The
store's next calls must not fail one by one on the dead connections of its pool: each is
refused at checkout, the rest are checked at once, and the call runs on a new one.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from underway.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


def test_calls_after_the_server_ended_every_session_do_not_fail(pg_url: str) -> None:
    store = PostgresStore(pg_url, min_size=3, max_size=3)
    try:
        store.migrate()
        # All three connections of the pool, checked out together: their sessions.
        with store.pool.connection() as a, store.pool.connection() as b, \
                store.pool.connection() as c:
            pids = [int(conn.info.backend_pid) for conn in (a, b, c)]
        with psycopg.connect(store.conninfo, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            deadline = time.monotonic() + 60
            while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                [pids]).fetchone() != (0,):
                assert time.monotonic() < deadline, "the sessions did not end"
                time.sleep(0.01)
        # Every call works, on new sessions, and none of the old ones is used again.
        for _ in range(6):
            assert store.schema_version() > 0
        with store.pool.connection() as conn:
            assert int(conn.info.backend_pid) not in pids
    finally:
        store.close()
