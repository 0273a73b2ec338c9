"""Shared fixtures. PostgreSQL tests use the real server named by UNDERWAY_TEST_PG (the
Makefile sets it) and fail — never skip — when it cannot be reached.

``make test`` runs the suite in several processes (pytest-xdist): every test has its own
schema, file and ports, so nothing here is shared between tests but the server itself."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
import pytest

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def pg_base_url() -> str:
    """The server the PostgreSQL tests use."""
    return os.environ.get("UNDERWAY_TEST_PG") or DEFAULT_PG


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a parallel run, the tests that kill real processes (the longest by far) go first,
    so that none of them is left to run alone at the end while the other processes idle."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("crash") is None)


class Janitor:
    """Drops what tests made on the real PostgreSQL on threads of its own, so that a test
    does not wait for it (``DROP DATABASE`` waits for a checkpoint: seconds to a minute on
    a busy machine). :meth:`close`, at the end of the session, waits for every drop and
    fails if one did not happen."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="pg-janitor")
        self._pending: list[tuple[str, Future[None]]] = []

    def drop(self, statement: str) -> None:
        """Run ``statement`` (a DROP) on the server soon, on its own connection."""
        self._pending.append((statement, self._pool.submit(self._run, statement)))

    def _run(self, statement: str) -> None:
        with psycopg.connect(self.base, autocommit=True, connect_timeout=60) as conn:
            conn.execute(statement)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        failed = [f"{statement}: {future.exception()}" for statement, future in self._pending
                  if future.exception() is not None]
        if failed:
            pytest.fail("left on PostgreSQL:\n" + "\n".join(failed), pytrace=False)


@pytest.fixture(scope="session")
def pg_janitor() -> Iterator[Janitor]:
    """Drops schemas and databases the tests made, off the tests' path."""
    janitor = Janitor(pg_base_url())
    yield janitor
    janitor.close()


@pytest.fixture
def pg_url(pg_janitor: Janitor) -> Iterator[str]:
    """A URL selecting a fresh, empty schema on the real PostgreSQL; dropped afterwards."""
    base = pg_base_url()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=60) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {base} is unreachable: {exc}", pytrace=False)
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}schema={schema}"
    pg_janitor.drop(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    """A URL for a fresh SQLite file."""
    return f"sqlite:///{tmp_path}/underway.db"
