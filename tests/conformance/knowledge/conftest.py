"""One knowledge base contract, three backends: memory, SQLite and a real PostgreSQL (a
fresh schema per test). SQL backends share the connection of a migrated store, as an
application holding an engine would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from underway.knowledge import KnowledgeBase, open_knowledge
from underway.store import connect


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def database_url(request: pytest.FixtureRequest) -> str:
    """A URL naming a fresh database of each kind."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return "memory://"


@pytest.fixture
def knowledge(database_url: str) -> Iterator[KnowledgeBase]:
    """A knowledge base on a fresh, migrated store of each kind."""
    store = connect(database_url)
    kb = open_knowledge(store)
    yield kb
    kb.close()
    store.close()
