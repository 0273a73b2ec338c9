"""The blob collector and chunked values, on SQLite and PostgreSQL: the chunks of a blob it
deletes go with it, and so do old chunks that no blob row refers to (a crash before the
blob's row was written), while the chunks of blobs still referred to, and chunks written
within the grace, are kept. Ages are moved back by SQL, as days passing would."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

import underway as uw
from fakes.retention_world import DAY, make_runs
from underway.journal import Journal
from underway.ops import audit
from underway.privacy.retention import BLOB_GRACE, Retention, mark_blobs, sweep, sweep_blobs
from underway.store import Store, connect

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
CHUNK = 256
"""A small chunk size: each letter the runs write is a chunked blob."""
LEFT_BEHIND = "c" * 64
"""The address of chunks a crash left behind (no blob row was ever written)."""
JUST_WRITTEN = "d" * 64
"""The address of chunks written within the grace (their blob's row may be on its way)."""


def sql(url: str, statement: str, *args: Any) -> list[Any]:
    """Run ``statement`` on the store's database with a connection of its own."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return db.execute(statement.replace("%s", "?"), args).fetchall()
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(statement, args)
        return cur.fetchall() if cur.description else []


def chunk_keys(url: str) -> set[str]:
    return {r[0] for r in sql(url, "SELECT key FROM blob_chunks")}


def manifest_keys(url: str) -> set[str]:
    """The blob rows that are chunked blobs' manifests."""
    first = "x'02'" if url.startswith("sqlite") else "'\\x02'::bytea"
    return {r[0] for r in sql(url, f"SELECT key FROM blobs WHERE substr(data, 1, 1) = {first}")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_collector_deletes_chunks_no_blob_refers_to(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url = str(request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url"))
    store: Store = connect(url)
    store.codec.chunk_bytes = CHUNK
    make_runs(store)
    store.write_blob_chunks("default", LEFT_BEHIND, [b'"left ', b'behind"'])
    chunked = manifest_keys(url)
    assert chunked and chunked <= chunk_keys(url), "the letters are stored in chunks"
    for table in ("blobs", "blob_chunks"):
        sql(url, f"UPDATE {table} SET written_at = written_at - %s", 3 * DAY)
    store.write_blob_chunks("default", JUST_WRITTEN, [b'"just ', b'written"'])

    # The completed letters are purged: nothing refers to their blobs any more.
    assert sweep(store, Retention(completed=DAY), collect=False).purged == 2
    journal = Journal(store)
    marks = mark_blobs(journal, "default")
    assert not marks.problem
    doomed = chunked - marks.reached
    assert doomed and chunked & marks.reached, "some chunked blobs go, some stay"

    assert sweep_blobs(journal, marks, grace=BLOB_GRACE) > 0
    kept = manifest_keys(url)
    assert kept == chunked & marks.reached
    assert chunk_keys(url) == kept | {JUST_WRITTEN}, (
        "the deleted blobs' chunks and the old loose ones are gone; the referred-to and "
        "the recent ones stay")
    # What the remaining runs refer to is whole: each reads and verifies.
    assert audit.verify(store).ok
    for row in store.list_runs("default"):
        assert uw.Client(store).state(row.run_id) is not None
    store.close()
