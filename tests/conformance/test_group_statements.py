"""A group commit's plain batches (events, a run update, a checkpoint) are written with a
few statements for the whole group on PostgreSQL. Each batch is still fenced alone, on
every store: a refused one writes nothing and the others commit, with the bytes sent."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from builders import T0, batch, seqs
from test_append_many import leased

from underway.errors import ConflictError, FencedError, RunNotFound
from underway.store import Lease, RunUpdate, Store, StoredLabel, connect

RUNS = 16


def _group(leases: list[Lease]) -> list[Any]:
    return [batch(lease, 1, count=3, update=RunUpdate("ready", f"s{i}", T0 + i),
                  checkpoint=(4, f"state-{i}".encode()))
            for i, lease in enumerate(leases)]


@pytest.mark.parametrize("refusal", ["stale lease", "moved on", "missing run"])
@pytest.mark.parametrize("position", [0, 5, RUNS - 1])
def test_a_refused_plain_batch_writes_nothing_and_the_others_commit(
    store: Store, refusal: str, position: int,
) -> None:
    leases = leased(store, *(f"r{i}" for i in range(RUNS)))
    group = _group(leases)
    refused = leases[position]
    if refusal == "stale lease":
        group[position] = batch(refused, 1, fence=refused.token + 3, checkpoint=(2, b"x"))
    elif refusal == "moved on":
        group[position] = batch(refused, 1, expected=4, checkpoint=(2, b"x"))
    else:
        ghost = Lease("t1", "ghost", refused.owner, refused.token, refused.expires_at)
        group[position] = batch(ghost, 1, checkpoint=(2, b"x"))
    results = store.append_many(group)
    kind = {"stale lease": FencedError, "moved on": ConflictError,
            "missing run": RunNotFound | FencedError}[refusal]
    assert isinstance(results[position], kind), results
    assert [r for i, r in enumerate(results) if i != position] == [False] * (RUNS - 1)
    if refusal != "missing run":
        assert seqs(store, refused.run_id) == [1]
        assert store.load_checkpoint("t1", refused.run_id) is None
        row = store.get_run("t1", refused.run_id)
        assert row is not None and row.last_seq == 1
    for i, lease in enumerate(leases):
        if i == position:
            continue
        sent = group[i].events
        stored = store.load_events("t1", lease.run_id)[1:]
        assert [(e.seq, e.type, e.payload, e.hash) for e in stored] == [
            (e.seq, e.type, e.payload, e.hash) for e in sent]
        assert store.load_checkpoint("t1", lease.run_id) == (4, f"state-{i}".encode())
        row = store.get_run("t1", lease.run_id)
        assert row is not None
        assert (row.status, row.step, row.next_wake_at, row.last_seq, row.last_hash) == (
            "ready", f"s{i}", T0 + i, 4, sent[-1].hash)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """A migrated PostgreSQL store on a fresh schema. SQLite writes a group batch by batch,
    each in a savepoint: shared multi-row statements measured no cheaper there
    (bench/README.md, group commit)."""
    opened = connect(pg_url)
    yield opened
    opened.close()


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQL statements the PostgreSQL store sends (psycopg's executes)."""
    seen: list[str] = []
    execute = psycopg.Connection.execute

    def counted(self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any) -> Any:
        seen.append(str(query))
        return execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    yield seen


@pytest.mark.postgres
def test_a_plain_group_takes_a_few_statements_not_a_few_per_batch(
    pg_store: Store, statements: list[str],
) -> None:
    store = pg_store
    leases = leased(store, *(f"r{i}" for i in range(RUNS)))
    statements.clear()
    assert store.append_many(_group(leases)) == [False] * RUNS
    assert len(statements) < RUNS, statements
    assert all(seqs(store, lease.run_id) == [1, 2, 3, 4] for lease in leases)


def test_blobs_and_labels_of_a_batch_in_a_plain_group_are_written(store: Store) -> None:
    leases = leased(store, *(f"r{i}" for i in range(RUNS)))
    group = _group(leases)
    group[3] = dataclasses.replace(
        group[3], blobs={"k3": b"blob-3"},
        labels=(StoredLabel("team", "blue"),))
    assert store.append_many(group) == [False] * RUNS
    assert store.get_blobs("t1", ["k3"]) == {"k3": b"blob-3"}
    assert store.run_labels("t1", ["r3"]) == {"r3": (StoredLabel("team", "blue"),)}
    assert all(seqs(store, lease.run_id) == [1, 2, 3, 4] for lease in leases)
    assert store.load_checkpoint("t1", "r3") == (4, b"state-3")
