"""In-memory store: the same protocol and rules as the databases, for tests.

The store is one class made of one part per role, like the SQLite and PostgreSQL stores:
``journal``, ``runs``, ``leases`` (with queue limits and circuits), ``inbox`` (with the
registry), ``rows``, ``schedules`` (with intake), ``access`` (with API keys),
``consent``, ``retention`` (with holds), ``keys`` (with reseal), ``budgets``, ``spans``
and ``streams``. Every part works on the dictionaries this class makes, under one lock.
"""

from __future__ import annotations

import threading

from ...codec import Codec
from .. import limits
from .._offload import INLINE, Inline
from ..base import Dialect
from ..records import (
    ApproverRecord,
    IntakeRecord,
    QueueConfig,
    RunRecord,
    ScheduleRecord,
    SignalRecord,
    StoredEvent,
    StoredLabel,
)
from ..wakeups import Polling, Wakeups
from ._access import MemoryAccess
from ._budgets import MemoryBudgets
from ._consent import MemoryConsent
from ._inbox import MemoryInbox
from ._journal import MemoryJournal
from ._keys import MemoryKeys
from ._leases import MemoryLeases
from ._retention import MemoryRetention
from ._rows import MemoryRows
from ._runs import MemoryRuns
from ._schedules import MemorySchedules
from ._spans import MemorySpanExports
from ._streams import MemoryStreams

__all__ = ["SCHEMA_VERSION", "MemoryStore"]

SCHEMA_VERSION = 1
"""The schema version a migrated memory store reports."""


class MemoryStore(MemoryJournal, MemoryRuns, MemoryLeases, MemoryInbox, MemorySchedules,
                  MemoryAccess, MemoryConsent, MemoryRetention, MemoryKeys, MemoryRows,
                  MemoryBudgets, MemorySpanExports, MemoryStreams):
    """A :class:`~underway.store.base.Store` held in process memory.

    It does no I/O, so async code calls it inline (``offload``: see
    :mod:`underway.store._offload`)."""

    dialect: Dialect = "memory"
    offload: Inline = INLINE

    def __init__(self) -> None:
        MemoryAccess.__init__(self)
        MemoryConsent.__init__(self)
        MemoryRetention.__init__(self)
        MemorySpanExports.__init__(self)
        MemoryStreams.__init__(self)
        MemoryKeys.__init__(self)
        MemoryBudgets.__init__(self)
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""
        self._lock = threading.RLock()
        self._runs: dict[tuple[str, str], RunRecord] = {}
        self._events: dict[tuple[str, str], list[StoredEvent]] = {}
        self._checkpoints: dict[tuple[str, str], tuple[int, bytes]] = {}
        self._checkpoint_history: dict[tuple[str, str], dict[int, bytes]] = {}
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._chunks: dict[tuple[str, str], list[bytes]] = {}
        self._labels: dict[tuple[str, str], dict[str, StoredLabel]] = {}
        self._signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]] = {}
        self._schedules: dict[tuple[str, str], ScheduleRecord] = {}
        self._intake: dict[tuple[str, str], IntakeRecord] = {}
        self._owners: dict[tuple[str, str], str] = {}
        self._queues: dict[str, QueueConfig] = {}
        self._buckets: dict[limits.BucketKey, limits.Bucket] = {}
        self._version = 0
        self._circuits: dict[tuple[str, str], tuple[int, float | None, float | None]] = {}
        self._approvers: dict[tuple[str, str], ApproverRecord] = {}
        self._nonces: dict[tuple[str, str], tuple[str, str]] = {}

    def migrate(self) -> int:
        """Nothing to migrate in memory."""
        self._version = SCHEMA_VERSION
        return self._version

    def schema_version(self) -> int:
        """The schema version (1 once migrated)."""
        return self._version

    def wakeups(self, *, name: str) -> Wakeups:
        """Nothing is pushed in memory: workers poll."""
        return Polling()

    def close(self) -> None:
        """Nothing to close."""
