"""The storage protocol: :class:`Store`, the union of small protocols, one per role.

===================  ==========================  =====================================
role                 protocol                    holds
===================  ==========================  =====================================
database             :class:`Database`           schema, wake-ups, connections
journal              :class:`.JournalStore`      events, checkpoints, blobs
runs                 :class:`.RunStore`          the runs table, journals' heads
leases and queue     :class:`.LeaseStore`        claiming due runs, leases
inbox                :class:`.InboxStore`        signals, decision nonces
schedules            :class:`.ScheduleStore`     cron schedules and their ticks
intake               :class:`.IntakeStore`       outside events, entity owners
registry             :class:`.RegistryStore`     approvers and their public keys
limits               :class:`.LimitStore`        queue limits, circuit breakers
budgets              :class:`.BudgetStore`       tenants' daily budget holds
API keys             :class:`.ApiKeyStore`       API keys (hashed), webhook secrets
access log           :class:`.AccessLogStore`    reads of run data, append-only
keys                 :class:`.KeyStore`          tenants' data keys, wrapped
reseal               :class:`.ResealStore`       sealed rows a key rotation seals again
consent              :class:`.ConsentStore`      subjects' consent per purpose, append-only
legal holds          :class:`.HoldStore`         holds on runs and data subjects
retention            :class:`.RetentionStore`    purges, the sweep log, blob deletion
===================  ==========================  =====================================

Each role has a conformance suite (``tests/conformance/test_<role>.py``) that runs on
every backend. Every method takes the tenant (or, for work across tenants, says so). A
backend implements :class:`Store`; code that needs one role may ask for just that protocol.
The records exchanged live in :mod:`underway.store.records` and are re-exported here.
"""

from __future__ import annotations

from typing import Literal, Protocol

from ..codec import Codec
from .access import AccessLogStore
from .apikeys import ApiKeyStore
from .budgets import BudgetStore
from .consent import ConsentStore
from .holds import HoldStore
from .inbox import InboxStore
from .intake import IntakeStore
from .journal import AppendResult, JournalStore
from .keys import KeyStore
from .leases import LeaseStore
from .limits import LimitStore
from .records import (
    FINAL,
    HOLD_KINDS,
    AccessHead,
    AccessRecord,
    ApiKeyRecord,
    AppendBatch,
    ApproverRecord,
    CheckpointTail,
    ConsentRecord,
    DataKeyRecord,
    ForkLink,
    HoldRecord,
    IntakeRecord,
    IntakeRequest,
    IntakeSecretRecord,
    Lease,
    NewRun,
    Purge,
    PurgedRun,
    QueueConfig,
    RunRecord,
    RunUpdate,
    ScheduleRecord,
    SealedRow,
    SignalRecord,
    StartedRun,
    StoredEvent,
    SweepRecord,
)
from .registry import RegistryStore
from .reseal import ResealStore
from .retention import RetentionStore
from .runs import RunStore
from .schedules import ScheduleStore
from .wakeups import Wakeups

__all__ = [
    "FINAL",
    "HOLD_KINDS",
    "AccessHead",
    "AccessLogStore",
    "AccessRecord",
    "ApiKeyRecord",
    "ApiKeyStore",
    "AppendBatch",
    "AppendResult",
    "ApproverRecord",
    "BudgetStore",
    "CheckpointTail",
    "ConsentRecord",
    "ConsentStore",
    "DataKeyRecord",
    "Database",
    "Dialect",
    "ForkLink",
    "HoldRecord",
    "HoldStore",
    "InboxStore",
    "IntakeRecord",
    "IntakeRequest",
    "IntakeSecretRecord",
    "IntakeStore",
    "JournalStore",
    "KeyStore",
    "Lease",
    "LeaseStore",
    "LimitStore",
    "NewRun",
    "Purge",
    "PurgedRun",
    "QueueConfig",
    "RegistryStore",
    "ResealStore",
    "RetentionStore",
    "RunRecord",
    "RunStore",
    "RunUpdate",
    "ScheduleRecord",
    "ScheduleStore",
    "SealedRow",
    "SignalRecord",
    "StartedRun",
    "Store",
    "StoredEvent",
    "SweepRecord",
    "Wakeups",
]

Dialect = Literal["memory", "sqlite", "postgres"]
"""Which backend a store is: its SQL dialect (``memory`` has none)."""


class Database(Protocol):
    """What every backend is besides its roles: a schema, wake-ups and connections — and
    ``codec``, how payloads are encoded, sealed and opened on their way to and from this
    database: whoever reads or writes payloads on the store uses it, so turning
    encryption on for a store (``underway.crypto.encrypt``) turns it on for every path."""

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


class Store(
    Database,
    JournalStore,
    RunStore,
    LeaseStore,
    InboxStore,
    ScheduleStore,
    IntakeStore,
    RegistryStore,
    LimitStore,
    BudgetStore,
    ApiKeyStore,
    AccessLogStore,
    KeyStore,
    ResealStore,
    ConsentStore,
    HoldStore,
    RetentionStore,
    Protocol,
):
    """What the engine needs from a database: every role at once."""
