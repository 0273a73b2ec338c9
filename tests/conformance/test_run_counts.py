"""The runs by tenant and status that /metrics reads are counts the database keeps with
each change of the runs table (migration 0027). They equal a ``COUNT(*)`` of the runs after
many concurrent changes, a transaction lost to a crash, purges, forks, erasures and rows
deleted by hand, on SQLite and PostgreSQL; the migration counts the runs already there, and
PostgreSQL's per-connection rows fold without changing a sum."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any

import psycopg
import pytest
from builders import T0, batch, create, event, fake_hash, lease_of
from psycopg import sql
from store_backends import Backend

from underway.store import NewRun, RunUpdate, Store, StoredEvent, connect
from underway.store._urls import split_url
from underway.store.base import ForkLink

THREADS = 4
RUNS = 30
"""Runs each thread takes through its statuses."""
ENDS = (RunUpdate("completed", None, None), RunUpdate("failed", None, None, error="boom"),
        RunUpdate("waiting", "after", None, "underway.approval", request_kind="approval"),
        RunUpdate("escalated", "after", None, None, request_kind="question"),
        RunUpdate("waiting", "after", None, "go"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh database of each SQL kind (the memory stores count their rows directly)."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    b = Backend(request.param, url)
    yield b
    b.close()


@contextmanager
def raw(url: str) -> Iterator[Callable[..., list[Any]]]:
    """Plain SQL on the store's database, autocommitted (``%s`` placeholders on both)."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"),
                                     isolation_level=None)) as db:
            yield lambda q, *a: db.execute(q.replace("%s", "?"), a).fetchall()
        return
    base, schema = split_url(url)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)",
                     [sql.Identifier(schema or "public").as_string(conn)])
        yield lambda q, *a: (lambda c: c.fetchall() if c.description else [])(
            conn.execute(q, a))


def counted(url: str) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """(tenant, status, count) and (tenant, kind, count) counted from the runs rows."""
    with raw(url) as q:
        runs = q("SELECT tenant_id, status, COUNT(*) FROM runs GROUP BY 1, 2")
        kinds = q("SELECT tenant_id, request_kind, COUNT(*) FROM runs "
                  "WHERE request_kind IS NOT NULL AND status IN ('waiting', 'escalated') "
                  "GROUP BY 1, 2")
    return (sorted((t, s, int(n)) for t, s, n in runs),
            sorted((t, k, int(n)) for t, k, n in kinds))


def kept(url: str) -> list[tuple[str, str, int]]:
    """(tenant, status, count) as the counts table holds them, summed over slots."""
    with raw(url) as q:
        rows = q("SELECT tenant_id, status, SUM(n) FROM run_counts GROUP BY 1, 2 "
                 "HAVING SUM(n) <> 0")
    return sorted((t, s, int(n)) for t, s, n in rows)


def direct(backend: Backend) -> str:
    """The backend's database around any pooler: raw SQL here keeps session state (a
    search path, a backend pid to terminate) that must not reach a pooler's sessions."""
    assert backend.direct_url is not None
    return backend.direct_url


def assert_exact(store: Store, url: str) -> None:
    runs, kinds = counted(url)
    assert kept(url) == runs
    assert sorted(store.run_counts()) == runs
    assert sorted(store.request_counts()) == kinds


def test_a_scrape_reads_the_kept_counts_not_the_runs(backend: Backend) -> None:
    assert backend.url is not None
    store = backend.open()
    churn(store, 0, tenant="acme")
    assert_exact(store, direct(backend))
    with raw(direct(backend)) as q:  # a count no run backs: only a read of the counts sees it
        q("INSERT INTO run_counts (tenant_id, status, kind, slot, n) "
          "VALUES ('ghost', 'waiting', 'approval', 0, 7)")
    assert ("ghost", "waiting", 7) in store.run_counts()
    assert ("ghost", "approval", 7) in store.request_counts()


def churn(store: Store, worker: int, tenant: str) -> None:
    """Runs created, claimed and moved through every status, one thread's worth."""
    for i in range(RUNS):
        run_id = f"w{worker}-{i}"
        create(store, run_id, tenant=tenant)
        lease = lease_of(store, run_id, tenant=tenant, owner=f"w{worker}")
        store.append(batch(lease, 1, update=RunUpdate("ready", "next", T0)))
        store.append(batch(lease, 2, release=True, update=ENDS[(i + worker) % len(ENDS)]))


def test_counts_equal_the_runs_after_many_concurrent_changes(backend: Backend) -> None:
    assert backend.url is not None
    stores = [backend.open() for _ in range(THREADS)]
    gate = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def work(i: int) -> None:
        gate.wait()
        try:
            churn(stores[i], i, tenant=("acme", "globex")[i % 2])
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert_exact(stores[0], direct(backend))
    runs = dict(((t, s), n) for t, s, n in stores[0].run_counts())
    assert sum(runs.values()) == THREADS * RUNS
    assert runs[("acme", "completed")] == sum(
        1 for w in (0, 2) for i in range(RUNS) if (i + w) % len(ENDS) == 0)
    assert dict(((t, k), n) for t, k, n in stores[0].request_counts())[
        ("globex", "approval")] > 0


def test_a_transaction_lost_in_a_crash_counts_nothing(backend: Backend) -> None:
    assert backend.url is not None
    store = backend.open()
    churn(store, 0, tenant="acme")
    before = sorted(store.run_counts())
    if backend.url.startswith("sqlite:///"):
        # A process that dies mid-transaction leaves it uncommitted: rolled back.
        db = sqlite3.connect(backend.url.removeprefix("sqlite:///"), isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE runs SET status = 'dead'")
        db.execute("DELETE FROM runs WHERE status = 'dead' AND run_id LIKE 'w0-1%'")
        db.close()
    else:
        base, schema = split_url(direct(backend))
        with psycopg.connect(base, autocommit=True) as killer, psycopg.connect(base) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema or "")))
            conn.execute("UPDATE runs SET status = 'dead'")
            conn.execute("DELETE FROM runs WHERE run_id LIKE 'w0-1%'")
            pid = conn.info.backend_pid
            killer.execute("SELECT pg_terminate_backend(%s)", [pid])
            with pytest.raises(psycopg.OperationalError):
                conn.execute("COMMIT")
    assert sorted(store.run_counts()) == before
    assert_exact(store, direct(backend))


def test_purges_forks_erasures_and_deleted_rows_keep_the_counts(backend: Backend) -> None:
    from test_erasures import erasure
    from test_retention import finish, purge_of  # a finished run with what a purge needs

    assert backend.url is not None
    store = backend.open()
    finish(store, "p1")
    finish(store, "p2", status="failed", error="declined", subject="cust-1")
    create(store, "r1")
    store.append(batch(lease_of(store), 1, count=2, release=True,
                       update=RunUpdate("completed", None, None)))
    assert store.purge_run(purge_of(store, "p1")) == "purged"
    store.fork_run(NewRun(
        tenant_id="t1", run_id="fork-1", flow="f", idempotency_key=None,
        first_event=StoredEvent(1, "RunStarted", b"{}", fake_hash("fork-11")), blobs={},
        step="again", now=T0 + 50, next_wake_at=T0 + 50,
    ), ForkLink("t1", "r1", 3, event(4, "r1", "RunForked"), T0 + 50))
    store.erase_subject(erasure("cust-1", tenant_id="t1"))
    assert_exact(store, direct(backend))
    assert ("t1", "ready", 1) in store.run_counts()  # the fork
    with raw(direct(backend)) as q:  # rows an operator deletes by hand, a whole tenant's
        q("DELETE FROM runs WHERE tenant_id = %s", "t1")
    assert store.run_counts() == []
    assert_exact(store, direct(backend))


def test_the_migration_counts_the_runs_already_there(backend: Backend) -> None:
    assert backend.url is not None
    store = backend.open()
    churn(store, 0, tenant="acme")
    churn(store, 1, tenant="globex")
    want = sorted(store.run_counts())
    store.close()
    with raw(direct(backend)) as q:
        if backend.url.startswith("sqlite:///"):
            for trigger in ("runs_counted", "runs_uncounted", "runs_recounted"):
                q(f"DROP TRIGGER {trigger}")
        else:
            for trigger in ("runs_counted", "runs_uncounted", "runs_recounted",
                            "runs_truncated"):
                q(f"DROP TRIGGER {trigger} ON runs")
                q(f"DROP FUNCTION {trigger}()")
        q("DROP TABLE run_counts")
        # Migrations after 0027 are undone too, so the store runs each again.
        if backend.url.startswith("sqlite:///"):
            q("DROP TRIGGER forgotten_runs_no_update")
            q("DROP TRIGGER forgotten_runs_no_delete")
            q("DROP TABLE forgotten_runs")
        else:
            q("DROP TABLE forgotten_runs")
            q("DROP FUNCTION forgotten_runs_append_only()")
        q("ALTER TABLE retention_sweeps DROP COLUMN forgotten")
        q("DROP INDEX runs_updated")
        q("DELETE FROM underway_schema_version WHERE version >= 27")
        q("UPDATE runs SET status = 'dead' WHERE run_id LIKE %s", "w0-1%")  # before counts
    store = connect(backend.url)  # migrates
    try:
        assert sorted(store.run_counts()) != want
        assert_exact(store, direct(backend))
    finally:
        store.close()


@pytest.mark.postgres
def test_the_rows_of_closed_connections_fold_into_one_a_key(pg_url: str) -> None:
    backend = Backend("postgres", pg_url)
    try:
        stores = [backend.open() for _ in range(THREADS)]
        for i, s in enumerate(stores):
            churn(s, i, tenant="acme")
        for s in stores[1:]:
            s.close()
        with raw(pg_url) as q:
            slots = q("SELECT count(DISTINCT slot) FROM run_counts WHERE slot <> 0")[0][0]
        assert slots >= 2  # each connection counted into its own row
        want = sorted(stores[0].run_counts())
        kept = stores[0]._fold_counts()  # type: ignore[attr-defined]
        assert sorted(stores[0].run_counts()) == want
        assert_exact(stores[0], pg_url)
        with raw(pg_url) as q:
            live = {r[0] for r in q("SELECT pid FROM pg_stat_activity")}
            left = {r[0] for r in q("SELECT DISTINCT slot FROM run_counts")}
            assert 0 < kept <= q("SELECT count(*) FROM run_counts")[0][0]
        assert left - live <= {0}  # only the open pool's connections keep rows of their own
    finally:
        backend.close()


def test_one_statement_of_many_rows_counts_them_all(backend: Backend) -> None:
    assert backend.url is not None
    store = backend.open()
    series = ("WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 4999) "
              "SELECT i FROM n" if backend.url.startswith("sqlite:///")
              else "SELECT generate_series(0, 4999) AS i")
    mod = "%" if backend.url.startswith("sqlite:///") else "%%"
    with raw(direct(backend)) as q:  # as a bulk import would
        q(f"INSERT INTO runs (tenant_id, run_id, flow, status, step, last_seq, last_hash, "
          f"created_at, updated_at, request_kind) "
          f"SELECT CASE WHEN i {mod} 2 = 0 THEN 'acme' ELSE 'globex' END, 'b' || i, 'f', "
          f"CASE WHEN i {mod} 3 = 0 THEN 'waiting' ELSE 'completed' END, 's', 1, 'h', 1.0, "
          f"1.0, CASE WHEN i {mod} 15 = 0 THEN 'approval' END FROM ({series}) AS s")
    assert sum(n for _, _, n in store.run_counts()) == 5000
    assert_exact(store, direct(backend))
    with raw(direct(backend)) as q:
        q("UPDATE runs SET status = 'dead', request_kind = NULL WHERE tenant_id = %s", "acme")
        q("DELETE FROM runs WHERE status = %s", "completed")
    assert_exact(store, direct(backend))
