"""The stores a durable pydantic-ai run is tested on."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    """In memory, a fresh SQLite file, or a fresh schema on the real PostgreSQL."""
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    return url
