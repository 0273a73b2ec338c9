"""Every service test runs against a real uvicorn server, on SQLite and on a real
PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.service_world import World


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    w = World(db_url)
    yield w
    w.close()
