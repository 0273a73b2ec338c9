"""Erasure by crypto-shredding: after ``erase_subject``, none of the subject's canaries —
written through every path that stores a payload — can be recovered from the database or
from a backup taken before the erasure, with every key that remains (the keyring's KEK,
the backup's wrapped data keys, the vault as it is now); another subject's data still
reads back whole; every journal still verifies; the erased runs keep their skeleton; and
nothing new is stored about the subject. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import underway as uw
from fakes.canaries import CANARIES, TENANT, flows, found_in, write_everywhere
from underway.codec import Where, blob_where, box_of, signal_where
from underway.crypto import Envelope, KeyringFile, encrypt, reseal
from underway.crypto._box import box_key_id
from underway.crypto.datakeys import DataKeys
from underway.errors import KeyUnavailable, SubjectErased
from underway.events import PayloadPurged
from underway.journal import Journal
from underway.knowledge import open_knowledge
from underway.privacy.erasure import ErasureRefused, erase_subject
from underway.store import Store, connect
from underway.store._urls import split_url

ERASED, KEPT = "cust-1", "cust-2"
CONTROL = "CONTROL 5555 6666"
"""The other subject's canary: it must still read back (the scan can find what it seeks)."""


def _drive(store: Store) -> None:
    asyncio.run(uw.Runner(uw.Engine(store, flows=flows())).run_until_idle())


def _write(store: Store, tmp: Path) -> tuple[dict[str, str], str]:
    runs = write_everywhere(store, tmp, subject=ERASED)
    engine = uw.Engine(store, flows=flows())
    kept, _ = engine.start("waiting", {"phone": CONTROL}, tenant_id=TENANT, subject=KEPT)
    _drive(store)
    return runs, kept


def _everything_readable(store: Store) -> bytes:
    """Every payload of the store this process can open, as text: each run's events (an
    event that cannot be opened reads as ``[encrypted]``), knowledge, sealed blobs and
    signals (opened where they can be)."""
    client = uw.Client(store)
    journal = Journal(store)
    out: list[str] = []
    for row in store.list_runs(TENANT, limit=1000):
        stored = store.load_events(TENANT, row.run_id)
        out += [repr(e) for e in journal.decode_readable(TENANT, row.run_id, stored)]
        out.append(repr(client.get_run(row.run_id, tenant_id=TENANT)))
    record = open_knowledge(store).get(TENANT, "pref-1")
    out.append(repr(record))
    for kind in ("blob", "signal"):
        for sealed in store.sealed_rows(TENANT, kind, after=(), limit=100_000):
            where: Where = (blob_where(TENANT, sealed.position[0]) if kind == "blob"
                            else signal_where(TENANT, sealed.position[1], str(sealed.name)))
            try:
                out.append(store.codec.open(sealed.data, where).decode(errors="replace"))
            except KeyUnavailable:
                out.append("[encrypted]")
    return "\n".join(out).encode()


def _erase(store: Store, runs: dict[str, str]) -> Any:
    with pytest.raises(ErasureRefused) as refused:
        erase_subject(store, ERASED, by="dpo", reason="request 7", tenant_id=TENANT)
    # Waiting for a signal, or dead-lettered (it could be resumed): not ended.
    assert set(refused.value.runs) == {runs["waiting"], runs["intake-opened"], runs["dead"]}
    assert "still active" in str(refused.value)
    assert all(k.state != "destroyed" for k in store.list_data_keys(TENANT))
    # Asked to cancel them first, the erasure waits for a worker to end them.
    return erase_subject(store, ERASED, by="dpo", reason="request 7", tenant_id=TENANT,
                         cancel_active=True, sleep=lambda _: _drive(store))


def _rotate_tenant_key(store: Store) -> None:
    """A rotation of the tenant's key seals its rows again — but leaves those under a
    subject's key as they are (else the erasure could not reach them)."""
    envelope = store.codec.sealer
    assert isinstance(envelope, Envelope)
    envelope.keys.rotate(TENANT)
    scopes = {k.key_id: k.scope for k in store.list_data_keys(TENANT)}
    before = {kind: store.sealed_rows(TENANT, kind, after=(), limit=100_000)
              for kind in ("blob", "signal")}
    assert any(scopes[box_key_id(box_of(r.data))] for r in before["blob"])
    for kind in ("blob", "signal"):
        reseal(store, TENANT, kind, limit=100_000)
        after = {r.position: r.data for r in store.sealed_rows(TENANT, kind, after=(),
                                                                limit=100_000)}
        for row in before[kind]:
            if scopes[box_key_id(box_of(row.data))]:
                assert after[row.position] == row.data


def _child(store: Store) -> str:
    return next(r.run_id for r in store.list_runs(TENANT, flow="child"))


def _check_after(store: Store, runs: dict[str, str], kept: str, keyring: Path) -> None:
    client = uw.Client(store)
    for run_id in [*runs.values(), kept]:
        assert client.verify(run_id, tenant_id=TENANT).ok, run_id
    # The skeleton: every event's type and time, nothing of its payload.
    events = client.events(runs["main"], tenant_id=TENANT)
    assert events and all(isinstance(e.event, PayloadPurged) for e in events)
    assert {e.event.event_type for e in events} >= {"RunStarted", "ToolSucceeded",
                                                    "ApprovalGranted", "RunCompleted"}
    live = _everything_readable(store)
    assert found_in(live) == set() and CONTROL.encode() in live
    with pytest.raises(SubjectErased):
        uw.Engine(store, flows=flows()).start("waiting", {"phone": "x"}, tenant_id=TENANT,
                                              subject=ERASED)
    log = store.list_erasures(TENANT)
    assert [(e.subject, e.vault, e.by) for e in log] == [(ERASED, "destroyed", "dpo")]
    assert log[0].keys >= 1 and log[0].knowledge == 1 and log[0].runs == len(runs) - 1 + 1


def _check_backup(backup: Store, keyring: Path) -> None:
    """Everything in the backup, read with every key that remains."""
    encrypt(backup, KeyringFile(keyring))
    found = _everything_readable(backup)
    assert CONTROL.encode() in found  # the other subject's data opens from the backup
    assert found_in(found) == set()
    keys = DataKeys(backup, KeyringFile(keyring))
    erased = [k for k in backup.list_data_keys(TENANT) if k.scope == f"subject:{ERASED}"]
    assert erased and all(k.state == "active" for k in erased)  # as they were backed up
    for rec in erased:
        with pytest.raises(SubjectErased):
            keys._open(rec)


def test_erasure_leaves_nothing_of_the_subject_in_sqlite_or_a_backup(tmp_path: Path) -> None:
    path, keyring = tmp_path / "underway.db", tmp_path / "underway.keyring"
    store = connect(f"sqlite:///{path}")
    encrypt(store, KeyringFile.create(keyring))
    runs, kept = _write(store, tmp_path)
    assert found_in(_everything_readable(store)) == set(CANARIES)  # all there before
    _rotate_tenant_key(store)
    with sqlite3.connect(path) as src, sqlite3.connect(tmp_path / "backup.db") as dst:
        src.backup(dst)
    about = {r.run_id for r in store.runs_of_subject(TENANT, ERASED)}
    assert about == set(runs.values()) | {_child(store)}
    done = _erase(store, runs)
    assert set(done.purged) == about and done.already == []
    assert store.runs_of_subject(TENANT, ERASED) == []
    _check_after(store, runs, kept, keyring)
    store.close()
    backup = connect(f"sqlite:///{tmp_path / 'backup.db'}")
    try:
        _check_backup(backup, keyring)
    finally:
        backup.close()


@pytest.fixture
def pg_backup(pg_url: str) -> Iterator[tuple[str, str]]:
    """The test's schema, and a URL for a schema its tables can be copied into."""
    conninfo, _ = split_url(pg_url)
    schema = f"b_{uuid.uuid4().hex[:12]}"
    yield pg_url, f"{pg_url.split('?')[0]}?schema={schema}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _copy_schema(url: str, to_url: str) -> None:
    """A backup: every table of ``url``'s schema copied, rows and all, to ``to_url``'s."""
    conninfo, schema = split_url(url)
    _, target = split_url(to_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{target}"')
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE'", (schema,))]
        for t in tables:
            conn.execute(f'CREATE TABLE "{target}"."{t}" (LIKE "{schema}"."{t}" INCLUDING ALL)')
            cols = ", ".join(f'"{r[0]}"' for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s AND is_generated = 'NEVER'", (schema, t)))
            conn.execute(f'INSERT INTO "{target}"."{t}" ({cols}) OVERRIDING SYSTEM VALUE '
                         f'SELECT {cols} FROM "{schema}"."{t}"')


@pytest.mark.postgres
def test_erasure_leaves_nothing_of_the_subject_in_postgres_or_a_backup(
    pg_backup: tuple[str, str], tmp_path: Path
) -> None:
    url, backup_url = pg_backup
    keyring = tmp_path / "underway.keyring"
    store = connect(url)
    encrypt(store, KeyringFile.create(keyring))
    runs, kept = _write(store, tmp_path)
    _copy_schema(url, backup_url)
    _erase(store, runs)
    _check_after(store, runs, kept, keyring)
    store.close()
    backup = connect(backup_url, migrate=False)
    try:
        _check_backup(backup, keyring)
    finally:
        backup.close()
