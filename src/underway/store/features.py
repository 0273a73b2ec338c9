"""Feature stores: the roles a feature owns, apart from the engine's core.

====================  ======================================  ==========================
feature               protocol                                roles
====================  ======================================  ==========================
privacy               :class:`PrivacyStore`                   access log, consent, holds,
                                                              retention, keys, reseal,
                                                              erased subjects
scheduling, intake    :class:`SchedulingStore`                schedules, intake
service               :class:`~.apikeys.ApiKeyStore`          API keys, webhook secrets
guard                 :class:`~.budgets.BudgetStore`          tenants' budget ledger
telemetry             :class:`~.spans.SpanExportStore`        span export cursors
streams               :class:`~.streams.LiveStreamStore`      model calls' live deltas
observation           :class:`~.observation.ObservationStore` request and status counts,
                                                              kept checkpoints
====================  ======================================  ==========================

A store gains a feature by composition: :class:`~underway.store.base.Store` is the core
and every feature protocol. Code of a feature asks for its protocol, not the whole store.

An engine asks for :class:`EngineStore`: the core and what its guard uses, the budget
ledger and subjects' consent. A feature an engine hosts takes its own protocol from the
engine's store, checked: :func:`scheduling`, :func:`privacy`, or
:func:`~underway.store.base.whole` for a client, which reaches every feature.
"""

from __future__ import annotations

from typing import Protocol, cast

from ..errors import ConfigurationError
from .access import AccessLogStore
from .apikeys import ApiKeyStore
from .budgets import BudgetStore
from .consent import ConsentStore
from .core import CoreStore, methods_of
from .holds import HoldStore
from .intake import IntakeStore
from .keys import KeyStore
from .observation import ObservationStore
from .reseal import ResealStore
from .retention import RetentionStore
from .schedules import ScheduleStore
from .spans import SpanExportStore
from .streams import LiveStreamStore

__all__ = [
    "FEATURES",
    "ApiKeyStore",
    "BudgetStore",
    "EngineStore",
    "PrivacyStore",
    "SchedulingStore",
    "observation",
    "privacy",
    "require",
    "scheduling",
]


class PrivacyStore(
    AccessLogStore,
    ConsentStore,
    HoldStore,
    RetentionStore,
    KeyStore,
    ResealStore,
    Protocol,
):
    """The privacy feature's roles: who read what, consent, holds, purges and keys."""


class SchedulingStore(ScheduleStore, IntakeStore, Protocol):
    """The scheduling feature's roles: cron schedules and outside events."""


FEATURES: dict[str, type] = {
    "privacy": PrivacyStore,
    "scheduling": SchedulingStore,
    "service": ApiKeyStore,
    "guard": BudgetStore,
    "telemetry": SpanExportStore,
    "streams": LiveStreamStore,
    "observation": ObservationStore,
}
"""Each feature's store protocol, by feature name."""


class EngineStore(CoreStore, BudgetStore, ConsentStore, Protocol):
    """What an engine asks for: the core, the guard's budget ledger and consent."""


def require(store: object, protocol: type, feature: str) -> object:
    """``store`` itself, once it is known to have every method of ``protocol``.

    Callers cast the answer to ``protocol`` (see :func:`scheduling`).

    Args:
        store: The store to check.
        protocol: The feature's protocol.
        feature: What needs it, for the error.

    Raises:
        ConfigurationError: The store lacks a method; the error names the first three.
    """
    missing = sorted(m for m in methods_of(protocol) if not hasattr(store, m))
    if missing:
        raise ConfigurationError(
            f"{feature} needs a {protocol.__name__}, and the store "
            f"{type(store).__name__} has no {', '.join(missing[:3])}; give it a store "
            "with every feature (underway.store.connect)")
    return store


def observation(store: object) -> ObservationStore:
    """``store`` as an :class:`ObservationStore` (counts, kept checkpoints...), checked."""
    return cast(ObservationStore, require(store, ObservationStore, "observation"))


def privacy(store: object) -> PrivacyStore:
    """``store`` as a :class:`PrivacyStore` (access log, consent, keys...), checked."""
    return cast(PrivacyStore, require(store, PrivacyStore, "privacy"))


def scheduling(store: object) -> SchedulingStore:
    """``store`` as a :class:`SchedulingStore` (schedules and intake), checked."""
    return cast(SchedulingStore, require(store, SchedulingStore, "scheduling and intake"))
