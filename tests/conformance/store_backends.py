"""Opening stores of each backend on one fresh database, for the conformance suite."""

from __future__ import annotations

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
