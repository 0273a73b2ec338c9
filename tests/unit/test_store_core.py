"""The core store stays small: what the engine needs, nothing a feature owns."""

from __future__ import annotations

import importlib
import sys

import pytest

from underway.errors import ConfigurationError
from underway.store import MemoryStore
from underway.store.base import Store, whole
from underway.store.core import CORE_LIMIT, CoreStore, methods_of
from underway.store.features import (
    FEATURES,
    EngineStore,
    PrivacyStore,
    SchedulingStore,
    privacy,
    scheduling,
)


def test_the_core_has_at_most_fifty_methods() -> None:
    assert len(methods_of(CoreStore)) <= CORE_LIMIT == 50


def test_the_store_is_the_core_and_every_feature_and_nothing_else() -> None:
    parts = [methods_of(CoreStore), *(methods_of(p) for p in FEATURES.values())]
    assert frozenset().union(*parts) == methods_of(Store)
    # No method belongs to two parts: each has one owner.
    assert sum(len(p) for p in parts) == len(methods_of(Store))


def test_the_engine_asks_for_the_core_and_the_guards_roles() -> None:
    extra = methods_of(EngineStore) - methods_of(CoreStore)
    assert extra == {"reserve_budget", "settle_budget", "budget_used", "record_consent",
                     "consent_history", "current_consents"}


def test_a_store_without_a_feature_is_refused_by_name() -> None:
    class Core:
        def put_schedule(self) -> None: ...

    with pytest.raises(ConfigurationError, match=r"scheduling and intake needs a "
                                                 r"SchedulingStore.*no advance_schedule"):
        scheduling(Core())
    with pytest.raises(ConfigurationError, match="privacy needs a PrivacyStore"):
        privacy(Core())
    with pytest.raises(ConfigurationError, match="a test needs a Store"):
        whole(Core(), by="a test")


def test_a_whole_store_has_every_feature() -> None:
    store = MemoryStore()
    assert scheduling(store) is store
    assert privacy(store) is store
    assert whole(store, by="a test") is store
    assert methods_of(PrivacyStore) | methods_of(SchedulingStore) <= methods_of(Store)


@pytest.mark.parametrize(("old", "new", "name"), [
    ("underway.store.regions", "underway.store.regional", "RegionalStore"),
    ("underway.store.regions_keys", "underway.store.regional._keys", "RegionalKeys"),
    ("underway.store.regions_retention", "underway.store.regional._retention",
     "RegionalRetention"),
    ("underway.store.memory_access", "underway.store.memory._access", "MemoryAccess"),
    ("underway.store.memory_budgets", "underway.store.memory._budgets", "MemoryBudgets"),
    ("underway.store.memory_consent", "underway.store.memory._consent", "MemoryConsent"),
    ("underway.store.memory_keys", "underway.store.memory._keys", "MemoryKeys"),
    ("underway.store.memory_retention", "underway.store.memory._retention",
     "MemoryRetention"),
    ("underway.store.memory_rows", "underway.store.memory._rows", "MemoryRows"),
])
def test_an_old_module_path_warns_and_gives_the_same_names(
    old: str, new: str, name: str
) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
