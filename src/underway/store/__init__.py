"""Storage backends behind one protocol made of small role protocols (see
:mod:`underway.store.base`); :func:`connect` picks a backend from a URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import ConfigurationError
from .base import (
    AppendBatch,
    AppendResult,
    IntakeRecord,
    IntakeRequest,
    Lease,
    NewRun,
    QueueConfig,
    RunRecord,
    RunUpdate,
    ScheduleRecord,
    SignalRecord,
    StartedRun,
    Store,
    StoredEvent,
    StoredLabel,
)
from .memory import MemoryStore

# The SQLite and PostgreSQL stores load the first time they are named (PEP 562): the
# PostgreSQL one brings psycopg and its pool, which memory and SQLite stores never need.
_load, _dir = lazy_exports(__name__, {"SQLiteStore": ".sqlite", "PostgresStore": ".postgres",
                                      "RegionalStore": ".regional"}, globals())
if TYPE_CHECKING:
    from .postgres import PostgresStore as PostgresStore
    from .regional import RegionalStore as RegionalStore
    from .sqlite import SQLiteStore as SQLiteStore
else:
    __getattr__, __dir__ = _load, _dir

__all__ = [
    "AppendBatch",
    "AppendResult",
    "IntakeRecord",
    "IntakeRequest",
    "Lease",
    "MemoryStore",
    "NewRun",
    "QueueConfig",
    "RunRecord",
    "RunUpdate",
    "ScheduleRecord",
    "SignalRecord",
    "StartedRun",
    "Store",
    "StoredEvent",
    "StoredLabel",
    "connect",
]


def connect(url: str, *, migrate: bool = True) -> Store:
    """Open a store from a URL and (by default) migrate it to the current schema.

    ``memory://``, ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, or
    ``postgresql://user@host:port/dbname`` (``?schema=name`` selects a schema).
    """
    store: Store
    if url.startswith("memory:"):
        store = MemoryStore()
    elif url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ConfigurationError(f"no file in SQLite URL {url!r}; use sqlite:///path.db")
        sqlite: type[SQLiteStore] = _load("SQLiteStore")
        store = sqlite(path)
    elif url.startswith(("postgresql://", "postgres://")):
        postgres: type[PostgresStore] = _load("PostgresStore")
        store = postgres(url)
    else:
        raise ConfigurationError(
            f"unsupported database URL {url!r}: use sqlite:///path.db, postgresql://... "
            "or memory://"
        )
    if migrate:
        store.migrate()  # the version read on opening serves: no second read
    else:
        vars(store).pop("_opened_at_newest", None)  # a later migrate() reads it again
    return store
