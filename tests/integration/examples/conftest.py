"""What both examples' tests share: the database they run on."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite file, or a fresh schema on the real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'underway.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url
