"""Opening stores of each backend on one fresh database, for the conformance suite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import psycopg
import pytest

from underway.store import MemoryStore, Store, connect
from underway.store.regional import RegionalStore

REGION_B = ("t2", "t3", "other")
"""The tenants of the regional backend's second region; every other tenant is in the
first (its default). So t1 and t2 span two regions, while acme and globex share one
database, as the access log's tests of one table need."""


class Backend:
    """Opens stores on one fresh database; several stores on it act as separate processes
    would (own connections). Memory has no second connection, so it hands out one store.
    ``regional`` is a :class:`RegionalStore` over two memory regions, handed out alike.
    ``pgbouncer`` is PostgreSQL through a real PgBouncer in transaction mode (``url``);
    ``direct_url`` reaches the same schema around it."""

    def __init__(self, name: str, url: str | None, direct_url: str | None = None) -> None:
        self.name = name
        self.url = url
        self.direct_url = direct_url or url
        """The database's URL on the server itself, for the tests that go around the
        store (its triggers, its rows)."""
        self._memory: MemoryStore | None = None
        self._regional: RegionalStore | None = None
        self._opened: list[Store] = []

    @property
    def in_memory(self) -> bool:
        """Whether the rows live in memory stores (memory, or regional over memory)."""
        return self.url is None

    @property
    def dialect(self) -> str:
        """The dialect the stores report (a regional store reports its regions')."""
        return {"regional": "memory", "pgbouncer": "postgres"}.get(self.name, self.name)

    def memories(self, store: Store) -> list[MemoryStore]:
        """The memory stores that hold ``store``'s rows (one per region)."""
        if isinstance(store, RegionalStore):
            return [s for s in store.regions.values() if isinstance(s, MemoryStore)]
        assert isinstance(store, MemoryStore)
        return [store]

    def memory_of(self, store: Store, tenant_id: str) -> MemoryStore:
        """The memory store that holds ``tenant_id``'s rows."""
        if isinstance(store, RegionalStore):
            found = store.store_of(tenant_id)
            assert isinstance(found, MemoryStore)
            return found
        assert isinstance(store, MemoryStore)
        return store

    def open(self) -> Store:
        """A migrated store on this backend's database."""
        if self.name == "regional":
            if self._regional is None:
                self._regional = RegionalStore(
                    {"a": MemoryStore(), "b": MemoryStore()},
                    tenants=dict.fromkeys(REGION_B, "b"), default="a")
                self._regional.migrate()
            return self._regional
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
        if self._regional is not None:
            self._regional.close()


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
    elif backend.dialect == "postgres":
        assert backend.direct_url is not None
        base, schema = backend.direct_url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            for statement in [*statements, f"TRUNCATE {table}"]:
                with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                    conn.execute(statement)
