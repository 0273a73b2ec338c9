"""The bulk-operation tests' world, on a fresh SQLite or PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bulk_world import World


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    w = World(str(request.getfixturevalue(name)))
    yield w
    w.close()
