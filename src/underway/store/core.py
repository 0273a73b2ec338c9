"""The core store: what the engine needs to run flows, and nothing more.

:class:`CoreStore` is the database, the journal, the runs, leases and their queue, the
inbox, the limits and the registry of approvers. Features bring their own roles
(:mod:`underway.store.features`); :class:`~underway.store.base.Store` is all of them.
A test keeps the core at 50 methods or fewer.
"""

from __future__ import annotations

import functools
from typing import Literal, Protocol

from ..codec import Codec
from .inbox import InboxStore
from .journal import JournalStore
from .leases import LeaseStore
from .limits import LimitStore
from .registry import RegistryStore
from .runs import RunStore
from .wakeups import Wakeups

__all__ = ["CORE_LIMIT", "CoreStore", "Database", "Dialect", "methods_of"]

CORE_LIMIT = 50
"""The most methods :class:`CoreStore` may have."""

Dialect = Literal["memory", "sqlite", "postgres"]
"""Which backend a store is: its SQL dialect (``memory`` has none)."""


class Database(Protocol):
    """What every backend is besides its roles: a schema, wake-ups and connections.

    ``codec`` is how payloads are encoded, sealed and opened in this database. Whoever
    reads or writes payloads on the store uses it. So turning encryption on for a store
    (``underway.crypto.encrypt``) turns it on for every path.
    """

    codec: Codec

    @property
    def dialect(self) -> Dialect:
        """Which backend this is (the SQL files and migrations it uses)."""
        ...

    def migrate(self) -> int:
        """Apply pending migrations; return the schema version now in place."""
        ...

    def schema_version(self) -> int:
        """The highest migration applied (0 for an empty database)."""
        ...

    def wakeups(self, *, name: str) -> Wakeups:
        """A source of wake-ups for one worker (``name`` tells its connections apart)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class CoreStore(
    Database,
    JournalStore,
    RunStore,
    LeaseStore,
    InboxStore,
    RegistryStore,
    LimitStore,
    Protocol,
):
    """What the engine needs from a database: the roles it runs flows with."""


@functools.cache
def methods_of(protocol: type) -> frozenset[str]:
    """The public methods and properties a protocol declares, its bases' included."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        names.update(k for k, v in vars(cls).items()
                     if not k.startswith("_") and (callable(v) or isinstance(v, property)))
    return frozenset(names)
