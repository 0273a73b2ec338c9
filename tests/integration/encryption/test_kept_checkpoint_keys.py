"""Kept checkpoints (the ones a newer checkpoint replaced) through every path that seals,
re-seals, destroys or collects: a tenant key rotation, a data subject's key rotation, a fork
and a replay after them, the retention blob collector, and a subject's erasure. On the
memory store, SQLite and PostgreSQL.

A checkpoint is never sealed again: the event at its seq commits to its stored bytes. A
rotation retires the old key and keeps it, so every kept checkpoint still opens and the
journal still vouches for it. The collector keeps the blobs only kept checkpoints refer to.
An erasure drops them with the run's checkpoint before it destroys the subject's keys."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import underway as uw
from underway.crypto import Envelope, KeyringFile, encrypt, reseal
from underway.journal import Journal
from underway.journal._journal import states_around
from underway.journal.state import RunState
from underway.ops.replay import replay_run
from underway.privacy.erasure import erase_subject
from underway.privacy.retention import mark_blobs, sweep_blobs
from underway.store import Store, connect
from underway.store.records import SUBJECT_SCOPE
from underway.testing import ManualClock

TENANT = "acme"
SUBJECT = "cust-7"
STEPS = 30
BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
SQL_BACKENDS = BACKENDS[1:]


class Notes(BaseModel):
    """Four notes of 400 characters: together over the blob threshold, so each checkpoint
    stores them as one blob that no event refers to (a step's patch changes one note)."""

    n: int = 0
    notes: dict[str, str] = {}


flow: uw.Flow[Notes, Any] = uw.Flow("kept-notes", state=Notes)


@flow.step(start=True)
async def write(ctx: uw.RunContext[Notes, Any]) -> Any:
    ctx.state.n += 1
    ctx.state.notes[f"k{ctx.state.n % 4}"] = f"{ctx.state.n:04d}" + "y" * 396
    return ctx.goto(write) if ctx.state.n < STEPS else ctx.done(ctx.state.n)


def _open(backend: str, request: pytest.FixtureRequest, keyring: Path) -> tuple[Store, str]:
    url = "memory://" if backend == "memory" else request.getfixturevalue(
        "sqlite_url" if backend == "sqlite" else "pg_url")
    store = connect(url)
    encrypt(store, KeyringFile(keyring))
    return store, url


def _again(store: Store, url: str, keyring: Path) -> Store:
    """A fresh view of the database: no key held from before (the memory store forgets)."""
    if url.startswith("memory"):
        envelope = store.codec.sealer
        assert isinstance(envelope, Envelope)
        envelope.keys.forget()
        return store
    fresh = connect(url)
    encrypt(fresh, KeyringFile(keyring))
    return fresh


def _engine(store: Store) -> uw.Engine:
    return uw.Engine(store, flows=[flow], clock=ManualClock(1_700_000_000.0),
                     checkpoint_every=10)


def _run(store: Store, subject: str | None = None) -> str:
    engine = _engine(store)
    run_id, _ = engine.start(flow, None, tenant_id=TENANT, subject=subject)
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id, tenant_id=TENANT).status == "completed"
    return run_id


def _kept(store: Store, run_id: str) -> list[int]:
    """The seqs of the run's checkpoints before its last event (the kept ones)."""
    last = store.get_run(TENANT, run_id).last_seq  # type: ignore[union-attr]
    return sorted({c.seq for s in range(2, last + 1)
                   if (c := store.checkpoint_before(TENANT, run_id, s)) is not None})


def _folded(store: Store, run_id: str, seq: int) -> RunState:
    history = Journal(store).history(TENANT, run_id)
    return states_around(RunState(tenant_id=TENANT, run_id=run_id), history, seq)[2]


def _all_vouched_for(store: Store, run_id: str, seqs: list[int]) -> None:
    """Every checkpoint at ``seqs`` opens, the journal vouches for it, and the state after
    the event just past it equals the fold from the first event."""
    journal = Journal(store)
    for seq in seqs:
        found = store.checkpoint_before(TENANT, run_id, seq + 1)
        assert found is not None and found.seq == seq
        state, _ = journal._trusted(TENANT, run_id, (found.seq, found.state), found.tail,
                                    past=True)
        assert state is not None, f"the checkpoint at seq {seq} is not vouched for"
        _, _, after = journal.states_at(TENANT, run_id, seq + 1)
        assert after.to_json() == _folded(store, run_id, seq + 1).to_json()


def _rotate(store: Store, scope: str = "") -> str:
    """Rotate the tenant's (or the scope's) key and seal the stored rows again."""
    envelope = store.codec.sealer
    assert isinstance(envelope, Envelope)
    old = store.active_data_key(TENANT, scope)
    assert old is not None
    rec = envelope.keys.rotate(TENANT, scope)
    for kind in ("blob", "signal", "schedule"):
        reseal(store, TENANT, kind, limit=100_000)
    # The old key is retired and kept: what it sealed (events, checkpoints) still opens.
    assert store.get_data_key(TENANT, old.key_id).state == "retired"  # type: ignore[union-attr]
    return rec.key_id


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    path = tmp_path / "keyring.json"
    KeyringFile.create(path)
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_kept_checkpoints_open_after_a_tenant_key_rotation(
    backend: str, request: pytest.FixtureRequest, keyring: Path,
) -> None:
    store, url = _open(backend, request, keyring)
    run_id = _run(store)
    seqs = _kept(store, run_id)
    assert len(seqs) >= 5, seqs
    _rotate(store)
    # A run after the rotation seals its checkpoints under the new key.
    later = _run(store)
    fresh = _again(store, url, keyring)
    _all_vouched_for(fresh, run_id, seqs)
    _all_vouched_for(fresh, later, _kept(fresh, later))
    # A fork reads its state at the seq from the nearest kept checkpoint.
    at = seqs[2] + 1
    fork = uw.Client(fresh, flows=[flow]).fork(run_id, at_seq=at, by="ops", step="write",
                                              tenant_id=TENANT)
    forked = uw.Client(fresh).state(fork.run_id, tenant_id=TENANT)
    assert forked.state == _folded(fresh, run_id, at).state
    # A replay reads the original's journal, sealed under the retired key.
    result = asyncio.run(replay_run(fresh, run_id, flows=[flow], tenant_id=TENANT))
    assert result.stopped is None and not result.divergences


@pytest.mark.parametrize("backend", BACKENDS)
def test_kept_checkpoints_open_after_a_subject_key_rotation(
    backend: str, request: pytest.FixtureRequest, keyring: Path,
) -> None:
    store, url = _open(backend, request, keyring)
    run_id = _run(store, subject=SUBJECT)
    seqs = _kept(store, run_id)
    _rotate(store, SUBJECT_SCOPE + SUBJECT)
    later = _run(store, subject=SUBJECT)
    fresh = _again(store, url, keyring)
    _all_vouched_for(fresh, run_id, seqs)
    _all_vouched_for(fresh, later, _kept(fresh, later))
    at = seqs[-2] + 2
    fork = uw.Client(fresh, flows=[flow]).fork(run_id, at_seq=at, by="ops", step="write",
                                              tenant_id=TENANT)
    assert uw.Client(fresh).state(fork.run_id, tenant_id=TENANT).state == \
        _folded(fresh, run_id, at).state


def _age_blobs(url: str, seconds: float) -> None:
    """Move every blob's written mark ``seconds`` into the past, as days passing would."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE blobs SET written_at = written_at - ?", (seconds,))
        return
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".blobs SET written_at = written_at - %s', (seconds,))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_the_blob_collector_keeps_what_kept_checkpoints_refer_to(
    backend: str, request: pytest.FixtureRequest, keyring: Path,
) -> None:
    store, url = _open(backend, request, keyring)
    run_id = _run(store)
    seqs = _kept(store, run_id)
    _rotate(store)
    _age_blobs(url, 30 * 86_400.0)
    journal = Journal(store)
    marks = mark_blobs(journal, TENANT)
    assert not marks.problem
    sweep_blobs(journal, marks, grace=0.0)
    _all_vouched_for(_again(store, url, keyring), run_id, seqs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_erasure_drops_the_kept_checkpoints_with_the_subjects_keys(
    backend: str, request: pytest.FixtureRequest, keyring: Path,
) -> None:
    store, url = _open(backend, request, keyring)
    run_id = _run(store, subject=SUBJECT)
    other = _run(store, subject="cust-8")
    last = store.get_run(TENANT, run_id).last_seq  # type: ignore[union-attr]
    assert len(_kept(store, run_id)) >= 5
    _rotate(store, SUBJECT_SCOPE + SUBJECT)
    done = erase_subject(store, SUBJECT, by="dpo", reason="request 9", tenant_id=TENANT)
    assert done.purged == [run_id]
    assert done.record.keys == 2  # the retired key and the active one
    fresh = _again(store, url, keyring)
    assert all(fresh.checkpoint_before(TENANT, run_id, s) is None
               for s in range(1, last + 2))
    if not url.startswith("memory"):
        assert _history_rows(url, run_id) == 0
    # The other subject's kept checkpoints are untouched.
    _all_vouched_for(fresh, other, _kept(fresh, other))


def _history_rows(url: str, run_id: str) -> int:
    """Kept checkpoint rows of the run, read from the table itself."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return int(db.execute("SELECT count(*) FROM checkpoint_history WHERE run_id = ?",
                                  (run_id,)).fetchone()[0])
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".checkpoint_history '
                           "WHERE run_id = %s", (run_id,)).fetchone()
        assert row is not None
        return int(row[0])
