"""The storage protocol: :class:`Store`, the core and every feature, one protocol per role.

The engine needs only :class:`~.core.CoreStore`. Each feature owns its roles
(:mod:`underway.store.features`). A backend implements :class:`Store`, all of them.

=========  ==================  ===========================  =================================
part       role                protocol                     holds
=========  ==================  ===========================  =================================
core       database            :class:`~.core.Database`     schema, wake-ups, connections
core       journal             :class:`.JournalStore`       events, checkpoints, blobs
core       runs                :class:`.RunStore`           the runs table, journals' heads
core       leases and queue    :class:`.LeaseStore`         claiming due runs, leases
core       inbox               :class:`.InboxStore`         signals, decision nonces
core       registry            :class:`.RegistryStore`      approvers and their public keys
core       limits              :class:`.LimitStore`         queue limits, circuit breakers
guard      budgets             :class:`.BudgetStore`        tenants' daily budget holds
privacy    access log          :class:`.AccessLogStore`     reads of run data, append-only
privacy    keys                :class:`.KeyStore`           data keys, wrapped; erased subjects
privacy    reseal              :class:`.ResealStore`        rows a key rotation seals again
privacy    consent             :class:`.ConsentStore`       consent per purpose, append-only
privacy    legal holds         :class:`.HoldStore`          holds on runs and data subjects
privacy    retention           :class:`.RetentionStore`     purges, the sweep log, blobs
schedules  schedules           :class:`.ScheduleStore`      cron schedules and their ticks
schedules  intake              :class:`.IntakeStore`        outside events, entity owners
service    API keys            :class:`.ApiKeyStore`        API keys (hashed), webhook secrets
telemetry  span exports        :class:`.SpanExportStore`    how far each run's spans were sent
streams    live streams        :class:`.LiveStreamStore`    deltas of model calls in flight
observe    observation         :class:`.ObservationStore`   index counts, kept checkpoints
=========  ==================  ===========================  =================================

Core roles make :class:`~.core.CoreStore`; privacy roles make
:class:`~.features.PrivacyStore`; schedules and intake make
:class:`~.features.SchedulingStore`. Each role has a conformance suite
(``tests/conformance/test_<role>.py``) that runs on every backend. Every method takes the
tenant (or, for work across tenants, says so). Code that needs one role or feature asks
for just that protocol. The records exchanged live in :mod:`underway.store.records` and
are re-exported here.
"""

from __future__ import annotations

from typing import Protocol, cast

from .access import AccessLogStore
from .apikeys import ApiKeyStore
from .budgets import BudgetStore
from .consent import ConsentStore
from .core import CoreStore, Database, Dialect
from .features import PrivacyStore, SchedulingStore, require
from .holds import HoldStore
from .inbox import InboxStore
from .intake import IntakeStore
from .journal import AppendResult, JournalStore
from .keys import KeyStore
from .leases import LeaseStore
from .limits import LimitStore
from .observation import ObservationStore
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
    Forget,
    ForgottenRun,
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
    StoredLabel,
    SweepRecord,
)
from .registry import RegistryStore
from .reseal import ResealStore
from .retention import RetentionStore
from .runs import RunStore
from .schedules import ScheduleStore
from .spans import SpanExportStore
from .streams import LiveStreamStore, NewDelta, StreamDelta
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
    "CoreStore",
    "DataKeyRecord",
    "Database",
    "Dialect",
    "Forget",
    "ForgottenRun",
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
    "LiveStreamStore",
    "NewDelta",
    "NewRun",
    "ObservationStore",
    "PrivacyStore",
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
    "SchedulingStore",
    "SealedRow",
    "SignalRecord",
    "SpanExportStore",
    "StartedRun",
    "Store",
    "StoredEvent",
    "StoredLabel",
    "StreamDelta",
    "SweepRecord",
    "Wakeups",
    "whole",
]


class Store(CoreStore, PrivacyStore, SchedulingStore, ApiKeyStore, BudgetStore,
            SpanExportStore, LiveStreamStore, ObservationStore, Protocol):
    """A whole backend: the engine's core and every feature's roles."""


def whole(store: object, *, by: str) -> Store:
    """``store`` as a whole :class:`Store` (every feature), checked; ``by`` needs it."""
    return cast(Store, require(store, Store, by))
