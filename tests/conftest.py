"""Shared fixtures. PostgreSQL tests use the real server named by UNDERWAY_TEST_PG (the
Makefile sets it) and fail — never skip — when it cannot be reached; so do the NATS
JetStream and RabbitMQ tests (UNDERWAY_TEST_NATS, UNDERWAY_TEST_AMQP), which first start
the local server with scripts/ensure-nats or scripts/ensure-rabbitmq when none answers."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def pg_base_url() -> str:
    """The server the PostgreSQL tests use."""
    return os.environ.get("UNDERWAY_TEST_PG") or DEFAULT_PG


@pytest.fixture
def pg_url() -> Iterator[str]:
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
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


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
