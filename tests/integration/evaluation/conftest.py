"""The evaluation and drift tests run on each backend: memory, SQLite and a real
PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from underway.store import Store, connect


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A migrated store on a fresh database of each kind."""
    url = "memory://"
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
    elif request.param == "postgres":
        url = request.getfixturevalue("pg_url")
    opened = connect(url)
    yield opened
    opened.close()
