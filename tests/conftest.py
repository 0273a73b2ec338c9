"""Shared fixtures. PostgreSQL tests use the real server named by UNDERWAY_TEST_PG (the
Makefile sets it) and fail — never skip — when it cannot be reached; so do the NATS
JetStream and RabbitMQ tests (UNDERWAY_TEST_NATS, UNDERWAY_TEST_AMQP), which first start
the local server with scripts/ensure-nats or scripts/ensure-rabbitmq when none answers.

``make test`` runs the suite in several processes (pytest-xdist): every test has its own
schema, file, ports, stream and queue, so nothing here is shared between tests but the
servers themselves."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest
from hypothesis import HealthCheck, settings

from fakes.pgbouncer import PgBouncer, throwaway_pgbouncer

# Property tests check results, never time: on a busy machine an example may take seconds.
# They draw the same examples on every machine (Hypothesis derandomizes by itself where it
# sees a CI environment), so a run here checks what a CI run checks.
settings.register_profile(
    "underway", deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("underway")

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
    yield from _fresh_schema(pg_janitor)


@pytest.fixture
def other_pg_url(pg_url: str, pg_janitor: Janitor) -> Iterator[str]:
    """A second fresh schema of the same database, as ``pg_url`` is one."""
    yield from _fresh_schema(pg_janitor)


def _fresh_schema(pg_janitor: Janitor) -> Iterator[str]:
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


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the test PostgreSQL, one per test
    process, stopped at the end of the session."""
    with throwaway_pgbouncer(pg_base_url()) as bouncer:
        yield bouncer


@pytest.fixture
def pgbouncer_url(pg_url: str, pgbouncer: PgBouncer) -> str:
    """``pg_url``'s fresh schema through PgBouncer in transaction mode:
    ``pooler=transaction``, no ``listen_url`` (workers poll). The schema is migrated
    straight on the server first: a migration through PgBouncer takes twice as long, and
    the suites that run on this fixture test the store, not its migrations
    (tests/integration/test_pgbouncer.py migrates through PgBouncer)."""
    from underway.store import connect

    connect(pg_url).close()
    return pgbouncer.route(pg_url)


@pytest.fixture
def pgbouncer_listen_url(pg_url: str, pgbouncer: PgBouncer) -> str:
    """``pg_url``'s fresh schema through PgBouncer in transaction mode, with
    ``listen_url`` naming the server directly for LISTEN."""
    return pgbouncer.route(pg_url, listen=True)


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    """A URL for a fresh SQLite file."""
    return f"sqlite:///{tmp_path}/underway.db"


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _answers(url: str) -> bool:
    parts = urlparse(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), 5):
            return True
    except OSError:
        return False


def _ensure_server(url_env: str, script: str, default: str) -> str:
    """The URL of a server that answers: ``$url_env``, else ``default`` — started by
    ``scripts/<script>`` when nothing answers there. Fails (never skips) when none does."""
    url = os.environ.get(url_env) or default
    if not _answers(url):
        done = subprocess.run([str(SCRIPTS / script)], capture_output=True, text=True,
                              timeout=300, check=False)
        url = done.stdout.strip() or url
        if done.returncode != 0 or not _answers(url):
            pytest.fail(f"no server answers at {url} ({script}: {done.stderr.strip()})",
                        pytrace=False)
    return url


@pytest.fixture(scope="session")
def nats_url() -> str:
    """The real NATS server with JetStream the tests use."""
    return _ensure_server("UNDERWAY_TEST_NATS", "ensure-nats", "nats://127.0.0.1:4222")


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """The real RabbitMQ broker the tests use."""
    return _ensure_server("UNDERWAY_TEST_AMQP", "ensure-rabbitmq",
                          "amqp://guest:guest@127.0.0.1:5672/")
