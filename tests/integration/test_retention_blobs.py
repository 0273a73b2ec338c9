"""Blob collection beside live runs, on SQLite and PostgreSQL: between the collector's
marking and its deleting, live runs append events that refer to a blob nobody had and to a
blob only purged runs referred to; both are kept, and what only the purged runs referred
to is deleted. The blobs' age is moved back by SQL, as days passing would."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import psycopg
import pytest

import underway as uw
from fakes.retention_world import DAY, PERSON, engine_for, make_runs, start
from underway.codec import blob_key
from underway.events import canonical_json
from underway.journal import Journal
from underway.ops import audit
from underway.privacy.retention import BLOB_GRACE, Retention, mark_blobs, sweep, sweep_blobs
from underway.store import Store, connect

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
OLD = "an old customer whose account was closed"
NEW = "a new customer who has just signed up"


def age_blobs(url: str, seconds: float) -> None:
    """Move every blob's written mark ``seconds`` into the past."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE blobs SET written_at = written_at - ?", (seconds,))
        return
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".blobs SET written_at = written_at - %s', (seconds,))


def letter_blobs(who: str) -> set[str]:
    """The blobs a ``letter`` run for ``who`` writes: its call's text and receipt."""
    text = f"To {who}. " * 40
    return {blob_key(canonical_json(text)), blob_key(canonical_json(text * 2))}


@pytest.mark.parametrize("backend", BACKENDS)
def test_blobs_written_while_the_collector_decides_are_kept(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    store: Store = connect(url)
    make_runs(store)
    engine, _ = engine_for(store)
    forgotten = start(engine, "letter", who=OLD)
    asyncio.run(uw.Runner(engine).run_until_idle())
    engine.signal(forgotten, "sent", None)
    asyncio.run(uw.Runner(engine).run_until_idle())
    age_blobs(url, 3 * DAY)
    before = set(store.blob_keys("default"))
    assert letter_blobs(PERSON) | letter_blobs(OLD) <= before

    report = sweep(store, Retention(completed=DAY), collect=False)
    assert report.purged == 3
    journal = Journal(store)
    marks = mark_blobs(journal, "default")
    assert not marks.problem
    assert not (letter_blobs(PERSON) | letter_blobs(OLD)) & marks.reached

    # While the collector decides, live runs (of a worker that has sent nothing yet) write
    # a letter to the same person as the purged letters, and one to someone new.
    live, _ = engine_for(connect(url), at=time.time())
    again = start(live, "letter", who=PERSON)
    fresh = start(live, "letter", who=NEW)
    asyncio.run(uw.Runner(live).run_until_idle())

    deleted = sweep_blobs(journal, marks, grace=BLOB_GRACE)
    after = set(store.blob_keys("default"))
    assert deleted == len(before - after) > 0
    assert letter_blobs(OLD) <= before - after  # nobody refers to them, nobody wrote them
    assert letter_blobs(PERSON) | letter_blobs(NEW) <= after
    for run_id in (again, fresh):
        state = uw.Client(store).state(run_id)
        assert state.status == "waiting" and "To " in state.state["sent"]
    assert audit.verify(store).ok
    # The runs go on to their end, reading what they wrote.
    for run_id in (again, fresh):
        live.signal(run_id, "sent", None)
    asyncio.run(uw.Runner(live).run_until_idle())
    assert {uw.Client(store).state(r).status for r in (again, fresh)} == {"completed"}
    assert audit.verify(store).ok
    live.store.close()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blob_written_within_the_grace_is_kept_however_unreferenced(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    store: Store = connect(url)
    make_runs(store)
    report = sweep(store, Retention(completed=DAY))
    [done] = report.tenants
    # Written seconds ago, not days: a journal may still refer to them without sending.
    assert done.blobs_deleted == 0
    assert letter_blobs(PERSON) <= set(store.blob_keys("default"))
    age_blobs(url, 3 * DAY)
    second = sweep(store, Retention(completed=DAY))
    # The first sweep's collection ran: this one is not due (nothing purged since).
    assert second.tenants[0].blobs_deleted is None
    marks = mark_blobs(Journal(store), "default")
    unreferenced = set(store.blob_keys("default")) - marks.reached
    assert letter_blobs(PERSON) <= unreferenced
    assert sweep_blobs(Journal(store), marks, grace=BLOB_GRACE) == len(unreferenced)
    assert set(store.blob_keys("default")) == marks.reached
    assert audit.verify(store).ok
    store.close()
