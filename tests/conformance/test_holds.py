"""Legal holds on every backend: placed once per target, lifted and kept on record, listed
by tenant."""

from __future__ import annotations

import pytest
from builders import T0

from underway.errors import ConfigurationError
from underway.store import Store
from underway.store.base import HoldRecord


def hold(target: str, *, kind: str = "run", tenant: str = "t1", reason: str = "case 7",
         by: str = "legal", at: float = T0) -> HoldRecord:
    return HoldRecord(tenant, kind, target, reason, by, at)


def test_a_hold_is_placed_once_and_listed(store: Store) -> None:
    assert store.put_hold(hold("r1")) is True
    assert store.put_hold(hold("r1", reason="again", at=T0 + 1)) is False
    assert store.put_hold(hold("ann", kind="subject")) is True
    assert store.put_hold(hold("r1", tenant="t2")) is True
    assert store.list_holds("t1") == [hold("r1"), hold("ann", kind="subject")]
    assert [(h.tenant_id, h.kind, h.target) for h in store.list_holds()] == [
        ("t1", "run", "r1"), ("t1", "subject", "ann"), ("t2", "run", "r1")]
    assert store.list_holds("t3") == []


def test_a_released_hold_stays_on_record_and_can_be_placed_again(store: Store) -> None:
    store.put_hold(hold("r1"))
    assert store.release_hold("t1", "run", "r1", by="counsel", at=T0 + 5) is True
    assert store.release_hold("t1", "run", "r1", by="counsel", at=T0 + 6) is False
    assert store.release_hold("t1", "subject", "r1", by="counsel", at=T0 + 6) is False
    assert store.list_holds("t1") == []
    [gone] = store.list_holds("t1", released=True)
    assert (gone.released_at, gone.released_by, gone.active) == (T0 + 5, "counsel", False)
    assert store.put_hold(hold("r1", reason="new case", at=T0 + 9)) is True
    assert store.list_holds("t1") == [hold("r1", reason="new case", at=T0 + 9)]


def test_a_hold_names_what_it_holds_and_why() -> None:
    with pytest.raises(ConfigurationError, match="run or a subject"):
        hold("r1", kind="tenant")
    with pytest.raises(ConfigurationError, match="reason"):
        hold("r1", reason="")
