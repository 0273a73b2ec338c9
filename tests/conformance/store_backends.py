"""Opening stores of each backend on one fresh database, for the conformance suite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import psycopg
import pytest

from underway.store import MemoryStore, Store, connect


class Backend:
    """Opens stores on one fresh database; several stores on it act as separate processes
    would (own connections). Memory has no second connection, so it hands out one store."""

    def __init__(self, name: str, url: str | None) -> None:
        self.name = name
        self.url = url
        self._memory: MemoryStore | None = None
        self._opened: list[Store] = []

    def open(self) -> Store:
        """A migrated store on this backend's database."""
        if self.url is None:
            if self._memory is None:
                self._memory = MemoryStore()
                self._memory.migrate()
            return self._memory
        store = connect(self.url)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()
        if self._memory is not None:
            self._memory.close()


def assert_append_only(backend: Backend, table: str, statements: Sequence[str]) -> None:
    """The database refuses each of ``statements`` (an ``UPDATE`` and a ``DELETE`` of
    ``table``) as append-only, and ``TRUNCATE`` too on PostgreSQL: its triggers hold even
    for someone who goes around the store. Nothing to check for the memory store."""
    if backend.name == "sqlite":
        assert backend.url is not None
        conn = sqlite3.connect(backend.url.removeprefix("sqlite:///"))
        try:
            for statement in statements:
                with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                    conn.execute(statement)
        finally:
            conn.close()
    elif backend.name == "postgres":
        assert backend.url is not None
        base, schema = backend.url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            for statement in [*statements, f"TRUNCATE {table}"]:
                with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                    conn.execute(statement)
