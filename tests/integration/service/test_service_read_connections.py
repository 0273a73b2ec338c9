"""The API's reads of committed data: on SQLite, a ``GET`` reads on the store's read-only
connections, never on the writer's (where it would wait for every commit's flush), while
its access-log entry is still written, durably, on the writer's before the answer; and on
both databases a client reads at once what it was just answered as written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from fakes.service_world import World
from underway.store import Store


@contextmanager
def _statements(store: Store) -> Iterator[list[str]]:
    """The statements run on the SQLite store's writer connection during the block."""
    seen: list[str] = []
    with store.connection() as conn:  # type: ignore[attr-defined]
        assert isinstance(conn, sqlite3.Connection)
        conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        with store.connection() as conn:  # type: ignore[attr-defined]
            conn.set_trace_callback(None)


def _reads_outside_transactions(statements: list[str]) -> list[str]:
    """The SELECTs run outside a transaction: reads that waited for the writer's lock."""
    found, inside = [], False
    for statement in statements:
        word = statement.lstrip().split(None, 1)[0].upper()
        if word == "BEGIN":
            inside = True
        elif word in ("COMMIT", "ROLLBACK"):
            inside = False
        elif word in ("SELECT", "WITH") and not inside:
            found.append(statement)
    return found


@pytest.fixture
def sqlite_world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url)
    yield w
    w.close()


def test_gets_read_off_the_writers_connection_and_log_on_it(sqlite_world: World) -> None:
    world = sqlite_world
    run_id = world.start()
    headers = world.headers(role="viewer")
    with _statements(world.store) as seen:
        plain = world.http.get(f"/v1/runs/{run_id}", headers=headers)
        routed = world.http.get(f"/v1/runs/{run_id}", params={"purpose": "operations"},
                                headers=headers)
        events = world.http.get(f"/v1/runs/{run_id}/events", headers=headers)
        listed = world.http.get("/v1/runs", headers=headers)
    assert plain.status_code == routed.status_code == events.status_code == 200
    assert listed.status_code == 200 and plain.json() == routed.json()
    assert _reads_outside_transactions(seen) == []
    # Each read's access-log entry was written on the writer's connection, in a
    # transaction committed before its answer.
    inserts = [s for s in seen if "access_log" in s and s.lstrip().upper().startswith("INSERT")]
    assert len(inserts) >= 3
    assert sum(1 for s in seen if s.strip().upper() == "COMMIT") >= 1
    assert world.store.readers is not None  # type: ignore[attr-defined]


def test_a_client_reads_at_once_what_it_was_answered_as_written(world: World) -> None:
    admin = world.headers(role="admin")
    for n in range(10):
        started = world.http.post("/v1/runs", headers=world.headers(role="operator"), json={
            "flow": "reminders", "input": {"invoice": f"INV-{n}", "amount": 5},
            "labels": {"batch": n}})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        read = world.http.get(f"/v1/runs/{run_id}", headers=admin)
        assert read.status_code == 200, read.text
        assert read.json()["labels"] == {"batch": n}
        cancel = world.http.post(f"/v1/runs/{run_id}/cancel", headers=admin, json={})
        assert cancel.status_code == 202, cancel.text
        assert world.http.get(f"/v1/runs/{run_id}", headers=admin).json()["control_pending"]
        # The read's access-log entry, committed before its answer, is read at once.
        log = world.http.get("/v1/access-log", headers=admin).json()["entries"]
        assert any(e["run_id"] == run_id and e["endpoint"] == "GET /v1/runs/{run_id}"
                   for e in log)
    issued = world.http.post("/v1/api-keys", headers=admin,
                             json={"role": "viewer", "name": "fresh"})
    assert issued.status_code == 201, issued.text
    fresh = {"Authorization": f"Bearer {issued.json()['token']}"}
    assert world.http.get(f"/v1/runs/{run_id}", headers=fresh).status_code == 200
    # Revoked through another connection to the database (another process would do the
    # same): refused at the next request, on the plain path and the routed one.
    assert world.worker_store.revoke_api_key("acme", issued.json()["key_id"],
                                             at=world.clock.now())
    assert world.http.get(f"/v1/runs/{run_id}", headers=fresh).status_code == 401
    assert world.http.get(f"/v1/runs/{run_id}", params={"purpose": "operations"},
                          headers=fresh).status_code == 401
