"""Long-term knowledge of tenants, kept apart from run execution state.

A :class:`KnowledgeRecord` carries its text with where it came from (``source``), when
(``created_at``), how long it may be kept (``expires_at``), who may read it (``roles``) and
how sensitive it is (``sensitivity``). A :class:`KnowledgeBase` stores records per tenant,
finds them by words, never returns an expired one, erases on request (:meth:`delete`) and
sweeps expired ones away (:meth:`purge_expired`, :class:`KnowledgeSweeper`). Agents read it
through :func:`recall_tool` and, when allowed, write it through :func:`remember_tool`.

Three backends behave alike: in memory (tests), SQLite (FTS5, bm25) and PostgreSQL
(tsvector, ts_rank), each indexing the words :mod:`underway.knowledge.words` splits a text
into — letters, digits and the combining marks of Indic and other scripts. On a database
they live in their own tables (migrations 0007 and 0016), beside but apart from the runs,
events and checkpoints.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from .. import store as stores
from .._lazy import lazy_exports
from ..errors import ConfigurationError
from ..store import MemoryStore, Store, connect
from ._record import SENSITIVITIES, KnowledgeHit, KnowledgeRecord, Reindexed, Sensitivity
from ._sweeper import KnowledgeSweeper, sweep
from ._tools import recall_tool, remember_tool
from .base import KNOWLEDGE_SCHEMA_VERSION, KnowledgeBase
from .memory import MemoryKnowledge

# The SQL backends load the first time a knowledge base is opened on their database
# (PEP 562): the PostgreSQL one brings psycopg, which memory and SQLite never need.
_load, _dir = lazy_exports(
    __name__, {"SQLiteKnowledge": ".sqlite", "PostgresKnowledge": ".postgres"}, globals()
)
if TYPE_CHECKING:
    from .postgres import PostgresKnowledge
    from .sqlite import SQLiteKnowledge
else:
    __getattr__, __dir__ = _load, _dir

__all__ = [
    "SENSITIVITIES",
    "KnowledgeBase",
    "KnowledgeHit",
    "KnowledgeRecord",
    "KnowledgeSweeper",
    "MemoryKnowledge",
    "Reindexed",
    "Sensitivity",
    "open_knowledge",
    "recall_tool",
    "remember_tool",
    "sweep",
]

# One knowledge base per in-memory store, so every open_knowledge(store) sees the same
# records, and they go when the store does.
_IN_MEMORY: weakref.WeakKeyDictionary[MemoryStore, MemoryKnowledge] = (
    weakref.WeakKeyDictionary()
)


def open_knowledge(target: str | Store, *, migrate: bool = True) -> KnowledgeBase:
    """The knowledge base in the database of ``target``: a store (its connection or pool is
    shared and stays the caller's to close) or a URL as for :func:`underway.connect`
    (``memory://``, ``sqlite:///path.db``, ``postgresql://...``), which opens a store of its
    own that :meth:`KnowledgeBase.close` closes. ``migrate`` applies pending migrations when
    opening a URL; a store given must already be migrated.
    """
    if isinstance(target, str):
        if target.startswith("memory:"):
            return MemoryKnowledge()
        store = connect(target, migrate=migrate)
        try:
            return _on(store, owns_store=True)
        except BaseException:
            store.close()
            raise
    return _on(target, owns_store=False)


def _on(store: Store, *, owns_store: bool) -> KnowledgeBase:
    if isinstance(store, MemoryStore):
        found = _IN_MEMORY.get(store)
        if found is None:
            found = _IN_MEMORY[store] = MemoryKnowledge()
        return found
    dialect = store.dialect
    if dialect == "sqlite" and isinstance(store, stores.SQLiteStore):
        _check_schema(store)
        sqlite: type[SQLiteKnowledge] = _load("SQLiteKnowledge")
        return sqlite(store, owns_store=owns_store)
    if dialect == "postgres" and isinstance(store, stores.PostgresStore):
        _check_schema(store)
        postgres: type[PostgresKnowledge] = _load("PostgresKnowledge")
        return postgres(store, owns_store=owns_store)
    raise ConfigurationError(
        f"no knowledge base for a store of type {type(store).__name__}; use a memory, "
        "SQLite or PostgreSQL store or URL"
    )


def _check_schema(store: Store) -> None:
    version = store.schema_version()
    if version < KNOWLEDGE_SCHEMA_VERSION:
        raise ConfigurationError(
            f"the database schema is at version {version}, without the knowledge tables of "
            f"migration {KNOWLEDGE_SCHEMA_VERSION:04d}; run `underway db migrate` or call "
            "store.migrate()"
        )
