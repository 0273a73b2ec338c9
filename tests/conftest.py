"""Shared fixtures. PostgreSQL tests use the real server named by UNDERWAY_TEST_PG (the
Makefile sets it) and fail — never skip — when it cannot be reached."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

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
