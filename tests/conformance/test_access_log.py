"""The access log on every backend: entries are numbered in order, read back newest first
per tenant with filters and a ``before`` cursor; and nothing can change or remove one —
the protocol has no method for it, and the databases refuse it to plain SQL too. Each
tenant's entries form a hash chain with a head (tests/conformance/test_access_chain.py
attacks it)."""

from __future__ import annotations

import pytest
from store_backends import Backend, assert_append_only

from underway.store import Store
from underway.store.access import AccessLogStore
from underway.store.base import AccessRecord


def entry(run_id: str, at: float, *, tenant: str = "acme", key: str = "k1",
          purpose: str = "operations") -> AccessRecord:
    return AccessRecord(tenant, at, key, f"name-{key}", run_id, "GET /v1/runs/{run_id}",
                        purpose=purpose)


def test_entries_are_numbered_in_order_and_read_newest_first(store: Store) -> None:
    store.log_access([entry("r1", 10.0), entry("r2", 11.0)])
    store.log_access([entry("r3", 12.0, tenant="globex")])
    store.log_access([entry("r1", 13.0, key="k2")])
    found = store.list_access("acme")
    assert [(e.run_id, e.at, e.key_id) for e in found] == [
        ("r1", 13.0, "k2"), ("r2", 11.0, "k1"), ("r1", 10.0, "k1"),
    ]
    assert found[0].seq > found[1].seq > found[2].seq > 0
    assert found[1] == AccessRecord("acme", 11.0, "k1", "name-k1", "r2",
                                    "GET /v1/runs/{run_id}", found[1].seq, "operations",
                                    False, found[2].hash, found[1].hash)
    assert [e.run_id for e in store.list_access("globex")] == ["r3"]
    assert store.list_access("initech") == []


@pytest.mark.parametrize(("query", "expected"), [
    ({"run_id": "r1"}, [13.0, 10.0]),
    ({"key_id": "k1"}, [11.0, 10.0]),
    ({"since": 11.0}, [13.0, 11.0]),
    ({"until": 11.0}, [10.0]),
    ({"limit": 1}, [13.0]),
    ({"who": "name-k2"}, [13.0]),
    ({"purpose": "audit"}, [11.0]),
    ({"purpose": "operations", "run_id": "r1"}, [13.0, 10.0]),
])
def test_filters(store: Store, query: dict[str, object], expected: list[float]) -> None:
    store.log_access([entry("r1", 10.0), entry("r2", 11.0, purpose="audit"),
                      entry("r1", 13.0, key="k2")])
    assert [e.at for e in store.list_access("acme", **query)] == expected  # type: ignore[arg-type]


def test_pages_follow_on_by_the_before_cursor(store: Store) -> None:
    store.log_access([entry(f"r{i}", float(i)) for i in range(5)])
    first = store.list_access("acme", limit=2)
    second = store.list_access("acme", limit=2, before=first[-1].seq)
    third = store.list_access("acme", limit=2, before=second[-1].seq)
    assert [e.run_id for e in first + second + third] == ["r4", "r3", "r2", "r1", "r0"]


def test_the_protocol_has_no_way_to_change_or_remove_an_entry() -> None:
    methods = {name for name in vars(AccessLogStore) if not name.startswith("_")}
    assert methods == {"log_access", "list_access", "access_chain", "access_head"}


def test_the_database_refuses_to_change_or_delete_an_entry(backend: Backend,
                                                            store: Store) -> None:
    store.log_access([entry("r1", 10.0)])
    assert_append_only(backend, "access_log",
                       ("UPDATE access_log SET run_id = 'x'", "DELETE FROM access_log"))
    assert [e.run_id for e in store.list_access("acme")] == ["r1"]
