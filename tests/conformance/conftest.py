"""One store contract, five backends: every test here runs on memory, a regional store over
two memory regions, SQLite, a real PostgreSQL (a fresh schema per test), and that
PostgreSQL through a real PgBouncer in transaction mode. One suite per
role of the store protocol (:mod:`underway.store.base`): test_database, test_journal,
test_runs, test_leases, test_inbox, test_schedules_intake, test_registry, test_limits and
test_wakeups; and test_engine_on_store, whole flows on each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_backends import Backend

from underway.store import Store


@pytest.fixture(
    params=["memory", "regional", "sqlite",
            pytest.param("postgres", marks=pytest.mark.postgres),
            pytest.param("pgbouncer", marks=pytest.mark.postgres)]
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh database of each kind (``pgbouncer``: PostgreSQL through a real PgBouncer in
    transaction mode, ``pooler=transaction`` without ``listen_url``)."""
    url: str | None = None
    direct: str | None = None
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
    elif request.param == "postgres":
        url = request.getfixturevalue("pg_url")
    elif request.param == "pgbouncer":
        direct = request.getfixturevalue("pg_url")
        url = request.getfixturevalue("pgbouncer_url")
    b = Backend(request.param, url, direct)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A migrated store on a fresh database."""
    return backend.open()
