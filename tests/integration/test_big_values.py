"""Large values, on SQLite and PostgreSQL: a string longer than the codec's chunk size is
stored in chunks and read back whole; a value over the size limit fails its call with a
clear error and stores nothing; an audit reads a chunked blob and finds it sound; an
altered chunk is caught."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.errors import ToolCallError
from underway.journal import Journal
from underway.ops import audit
from underway.store import Store, connect

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
CHUNK = 1024
"""A small chunk size, so a test value spans many chunks."""


class Doc(BaseModel):
    text: str = ""
    failed: str = ""


def text_of(n: int) -> str:
    """``n`` characters with quotes, backslashes, control characters and non-ASCII text
    (escapes and multi-byte characters fall on chunk boundaries)."""
    unit = 'abc"def\\g\nhé€😀\x01'
    return (unit * (n // len(unit) + 1))[:n]


def flow_returning(value: str) -> uw.Flow[Doc, Any]:
    @uw.tool(mutating=False)
    def fetch(args: dict[str, Any]) -> Any:
        return value

    flow = uw.Flow("big", state=Doc)

    @flow.step(start=True)
    async def go(ctx: uw.RunContext[Doc, Any]) -> Any:
        try:
            ctx.state.text = await ctx.call(fetch, {})
        except ToolCallError as exc:
            ctx.state.failed = str(exc)
        return ctx.done(len(ctx.state.text))

    return flow


def open_store(request: pytest.FixtureRequest, db: str, limit: int | None = None) -> Store:
    store = connect(str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")))
    store.codec.chunk_bytes = CHUNK
    if limit is not None:
        store.codec.max_value_bytes = limit
    return store


def chunk_rows(store: Store) -> list[tuple[str, int]]:
    """(key, idx) of every stored chunk."""
    db: Any = store
    if hasattr(db, "_pool"):
        with db._pool.connection() as conn:
            return [(r[0], r[1]) for r in conn.execute(
                "SELECT key, idx FROM blob_chunks ORDER BY key, idx").fetchall()]
    return [(r[0], r[1]) for r in db._conn.execute(
        "SELECT key, idx FROM blob_chunks ORDER BY key, idx").fetchall()]


@pytest.mark.parametrize("db", BACKENDS)
def test_a_value_of_many_chunks_round_trips(db: str, request: pytest.FixtureRequest) -> None:
    store = open_store(request, db)
    value = text_of(CHUNK * 7 + 13)
    engine = uw.Engine(store, flows=[flow_returning(value)])
    run_id, _ = uw.Client(store).start("big", {})
    asyncio.run(uw.Runner(engine).run_until_idle())
    rows = chunk_rows(store)
    assert len(rows) == 8, "one chunk row per chunk"
    assert len({k for k, _ in rows}) == 1, "the result, the state's patch and the " \
        "checkpoint refer to one blob, stored once"
    # Read back by a fresh process's journal: the value, whole and equal.
    reader = connect(str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")),
                     migrate=False)
    history = Journal(reader).history("default", run_id)
    results = [r.event.result for r in history if isinstance(r.event, ev.ToolSucceeded)]
    assert results == [value]
    state = Journal(reader).load("default", run_id)
    assert isinstance(state.state, dict)
    assert state.status == "completed" and state.state["text"] == value
    assert audit.verify(reader, tenant_id="default", run_id=run_id).findings == []
    reader.close()
    store.close()


@pytest.mark.parametrize("db", BACKENDS)
def test_an_altered_chunk_is_caught(db: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    store = connect(url)
    store.codec.chunk_bytes = CHUNK
    engine = uw.Engine(store, flows=[flow_returning("x" * (CHUNK * 3))])
    run_id, _ = uw.Client(store).start("big", {})
    asyncio.run(uw.Runner(engine).run_until_idle())
    store.close()
    sql = "UPDATE blob_chunks SET data = {} WHERE idx = 1"
    if db == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as c:
            c.execute(sql.format("CAST('yyyy' AS BLOB)"))
    else:
        base, schema = url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'UPDATE "{schema}".blob_chunks SET data = \'yyyy\'::bytea WHERE idx = 1')
    reader = connect(url, migrate=False)
    assert audit.verify(reader, tenant_id="default", run_id=run_id).findings != []
    with pytest.raises(uw.IntegrityError):
        Journal(reader).history("default", run_id)
    reader.close()


@pytest.mark.parametrize("db", BACKENDS)
def test_a_value_over_the_limit_fails_its_call_and_stores_nothing(
        db: str, request: pytest.FixtureRequest) -> None:
    store = open_store(request, db, limit=CHUNK * 4)
    engine = uw.Engine(store, flows=[flow_returning("z" * (CHUNK * 5))])
    run_id, _ = uw.Client(store).start("big", {})
    asyncio.run(uw.Runner(engine).run_until_idle())
    state = Journal(store).load("default", run_id)
    assert state.status == "completed"
    assert isinstance(state.state, dict)
    message = state.state["failed"]
    assert "ValueTooLarge" in message and "'fetch'" in message
    assert f"{CHUNK * 4:,} bytes" in message, "the error names the limit"
    failed = [r.event for r in Journal(store).history("default", run_id)
              if isinstance(r.event, ev.ToolFailed)]
    assert [f.error_type for f in failed] == ["ValueTooLarge"]
    assert chunk_rows(store) == [], "nothing of the value was stored"
    store.close()
