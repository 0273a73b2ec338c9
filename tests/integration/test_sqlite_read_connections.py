"""SQLite's read-only connections (:mod:`underway.store.sqlite._readers`): reads within
:func:`~underway.store._reading.committed_reads` do not wait for the writer's connection,
a read inside a write transaction still sees the transaction's own rows, and a database in
memory (which another connection would not see) has none."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from underway.store import connect
from underway.store._reading import committed_reads
from underway.store.base import NewRun, StoredEvent
from underway.store.sqlite import SQLiteStore


@pytest.fixture
def store(sqlite_url: str) -> Iterator[SQLiteStore]:
    opened = connect(sqlite_url)
    assert isinstance(opened, SQLiteStore)
    yield opened
    opened.close()


def _create(store: SQLiteStore, run_id: str) -> None:
    store.create_run(NewRun(
        tenant_id="t1", run_id=run_id, flow="f", idempotency_key=None,
        first_event=StoredEvent(1, "RunStarted", b"{}", "ab" * 32), blobs={}, step="start",
        now=1.0, next_wake_at=1.0))


def test_reads_do_not_wait_while_the_writer_holds_a_transaction(store: SQLiteStore) -> None:
    _create(store, "r1")
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store._tx() as c:
            c.execute("UPDATE runs SET step = 'moved' WHERE run_id = 'r1'")
            holding.set()
            release.wait()

    held = threading.Thread(target=writer)
    held.start()
    try:
        assert holding.wait(30)
        found: list[str | None] = []
        done = threading.Event()

        def read() -> None:
            with committed_reads():
                row = store.get_run("t1", "r1")
                found.append(None if row is None else row.step)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        # Without read-only connections this read waits for the writer, which waits for
        # this test: the wait below is how that failure shows.
        assert done.wait(30), "a committed read waited for the writer's transaction"
        assert found == ["start"]  # what is committed, not the open transaction's row
    finally:
        release.set()
        held.join()
    with committed_reads():
        row = store.get_run("t1", "r1")
    assert row is not None and row.step == "moved"


def test_a_read_inside_a_write_transaction_sees_its_rows(store: SQLiteStore) -> None:
    _create(store, "r1")
    with committed_reads(), store._tx() as c:
        c.execute("UPDATE runs SET step = 'inside' WHERE run_id = 'r1'")
        row = store.get_run("t1", "r1")
        assert row is not None and row.step == "inside"


def test_a_database_in_memory_reads_on_its_one_connection() -> None:
    memory = SQLiteStore(":memory:")
    try:
        memory.migrate()
        assert memory.readers is None
        _create(memory, "r1")
        with committed_reads():
            assert memory.get_run("t1", "r1") is not None
    finally:
        memory.close()
