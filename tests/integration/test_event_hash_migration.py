"""Migration 0017: event hashes stored as their 32 bytes. A journal written before it (hex
text in the column) reads and verifies the same after it, and a row an insider edited to
something that is no hash is kept and still reported, not a failed migration."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

import underway as uw
from underway.store import connect
from underway.store.postgres import split_url


class N(BaseModel):
    n: int = 0


def counting_flow() -> uw.Flow[N, Any]:
    flow = uw.Flow("count", state=N)

    @flow.step
    async def go(ctx: uw.RunContext[N, Any]) -> Any:
        ctx.state.n += 1
        return ctx.goto(go) if ctx.state.n < 4 else ctx.done(ctx.state.n)

    return flow


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return url


@contextmanager
def raw(url: str) -> Iterator[Any]:
    """Plain SQL on the store's database (``%s`` placeholders on both)."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            yield lambda q, *a: db.execute(q.replace("%s", "?"), a).fetchall()
            db.commit()
        return
    base, schema = split_url(url)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)",
                     [sql.Identifier(schema or "public").as_string(conn)])
        yield lambda q, *a: (lambda c: c.fetchall() if c.description else [])(
            conn.execute(q, a))


def as_before_0017(url: str) -> None:
    """Put the database back as migration 0016 left it: hashes as hex text."""
    with raw(url) as q:
        if url.startswith("sqlite:///"):
            q("UPDATE events SET hash = lower(hex(hash))")
        else:
            q("ALTER TABLE events ALTER COLUMN hash TYPE text USING encode(hash, 'hex')")
        # Later migrations are undone too, so the store runs 0017 and each after it again.
        if url.startswith("sqlite:///"):
            q("DROP TRIGGER runs_counted")
            q("DROP TRIGGER runs_uncounted")
            q("DROP TRIGGER runs_recounted")
        else:
            for trigger in ("runs_counted", "runs_uncounted", "runs_recounted",
                            "runs_truncated"):
                q(f"DROP TRIGGER {trigger} ON runs")
                q(f"DROP FUNCTION {trigger}()")
        q("DROP TABLE run_counts")
        q("DROP TABLE budget_holds")
        q("DROP TABLE budget_usage")
        q("DROP TABLE run_labels")
        q("DROP TABLE span_exports")
        q("DROP TABLE stream_deltas")
        q("DROP TABLE blob_chunks")
        q("DROP INDEX signals_waiting")
        q("DROP INDEX signals_control")
        q("DROP INDEX runs_requests")
        q("ALTER TABLE runs DROP COLUMN request_kind")
        q("DROP INDEX runs_listing_status")
        q("DROP INDEX runs_listing_flow")
        q("DROP INDEX runs_listing_flow_status")
        q("CREATE INDEX runs_status ON runs (tenant_id, status, created_at)")
        if url.startswith("sqlite:///"):
            q("DROP TRIGGER checkpoint_replaced")
            q("DROP TRIGGER checkpoint_dropped")
        else:
            q("DROP TRIGGER checkpoint_replaced ON checkpoints")
            q("DROP TRIGGER checkpoint_dropped ON checkpoints")
            q("DROP FUNCTION checkpoint_replaced()")
            q("DROP FUNCTION checkpoint_dropped()")
        q("DROP TABLE checkpoint_history")
        if url.startswith("sqlite:///"):
            q("DROP TRIGGER forgotten_runs_no_update")
            q("DROP TRIGGER forgotten_runs_no_delete")
            q("DROP TABLE forgotten_runs")
        else:
            q("DROP TABLE forgotten_runs")
            q("DROP FUNCTION forgotten_runs_append_only()")
        q("ALTER TABLE retention_sweeps DROP COLUMN forgotten")
        q("DROP INDEX runs_updated")
        q("DELETE FROM underway_schema_version WHERE version >= 17")


def test_a_journal_stored_with_hex_hashes_verifies_after_the_migration(db_url: str) -> None:
    store = connect(db_url)
    engine = uw.Engine(store, flows=[counting_flow()])
    done, edited = (engine.start("count")[0] for _ in range(2))
    for run_id in (done, edited):
        assert asyncio.run(uw.Runner(engine).run_until_complete(run_id)).status == "completed"
    before = {r: store.load_events("default", r) for r in (done, edited)}
    store.close()
    with raw(db_url) as q:
        latest = q("SELECT max(version) FROM underway_schema_version")

    as_before_0017(db_url)
    with raw(db_url) as q:
        # An insider's edit: the hash column of one event no longer holds a hash.
        q("UPDATE events SET hash = %s WHERE run_id = %s AND seq = 3", "not a hash", edited)
        width = q("SELECT min(length(hash)), max(length(hash)) FROM events WHERE run_id = %s",
                  done)
    assert width == [(64, 64)]

    store = connect(db_url)  # migrates
    try:
        with raw(db_url) as q:
            assert q("SELECT max(version) FROM underway_schema_version") == latest
            width = q("SELECT min(length(hash)), max(length(hash)) FROM events "
                      "WHERE run_id = %s", done)
        assert width == [(32, 32)]
        assert store.load_events("default", done) == before[done]
        client = uw.Client(store)
        assert client.verify(done).ok
        report = client.verify(edited)
        assert (report.ok, report.bad_seq) == (False, 3)
        assert "hash does not match" in report.reason
        # The store goes on writing and reading hashes as before.
        engine = uw.Engine(store, flows=[counting_flow()])
        fresh, _ = engine.start("count")
        assert asyncio.run(uw.Runner(engine).run_until_complete(fresh)).status == "completed"
        assert client.verify(fresh).ok
    finally:
        store.close()
