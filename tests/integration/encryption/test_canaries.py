"""S4: with encryption on, Aadhaar-, PAN- and phone-like canaries written through every path
that stores a payload are nowhere in the database in plaintext — not in the SQLite file, not
in its write-ahead log (checkpointed or not), not in any column of any PostgreSQL table —
while every run still reads back whole with the key. With encryption off the same writes
leave the canaries in plaintext, so the scans can find them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fakes.canaries import (
    AADHAAR,
    CANARIES,
    PAN,
    PHONE,
    TENANT,
    found_in,
    postgres_rows,
    sqlite_bytes,
    sqlite_rows,
    write_everywhere,
)
from fakes.keys import encrypted
from underway import Client
from underway.knowledge import open_knowledge
from underway.scheduling.schedules import list_schedules
from underway.store import connect


def _reads_back_whole(store_url: str, kek: bytes, runs: dict[str, str]) -> None:
    """A fresh process with the key reads every canary back."""
    store = connect(store_url)
    try:
        encrypted(store, kek)
        client = Client(store)
        main = client.state(runs["main"], tenant_id=TENANT)
        assert main.status == "completed" and main.result["phone"] == PHONE
        assert AADHAAR in main.state["notes"] and len(main.state["history"]) == 40
        assert client.get_run(runs["failed"], tenant_id=TENANT).error == \
            f"customer {PHONE} refused (PAN {PAN})"
        assert client.readable_state(runs["dead"], tenant_id=TENANT).status == "dead"
        assert list_schedules(client, tenant_id=TENANT)[0].input == {
            "customer": "", "phone": PHONE, "aadhaar": AADHAAR}
        record = open_knowledge(store).get(TENANT, "pref-1")
        assert record is not None and record.metadata == {"aadhaar": AADHAAR}
        assert client.verify(runs["main"], tenant_id=TENANT).ok
        streamed = client.read_stream(runs["main"], tenant_id=TENANT)
        assert PAN in "".join(str(d.delta.get("text", "")) for d in streamed
                              if isinstance(d.delta, dict))
    finally:
        store.close()


def test_no_canary_is_stored_in_plaintext_in_sqlite_or_its_wal(tmp_path: Path) -> None:
    path = tmp_path / "underway.db"
    url = f"sqlite:///{path}"
    store = connect(url)
    kek = b"k" * 32
    encrypted(store, kek)
    # The WAL is never checkpointed while the test writes: what it holds is scanned as is.
    reader = sqlite3.connect(path)
    reader.execute("PRAGMA wal_autocheckpoint=0")
    runs = write_everywhere(store, tmp_path)
    assert Path(f"{path}-wal").stat().st_size > 0
    assert found_in(sqlite_bytes(path)) == set()
    assert found_in(sqlite_rows(path)) == set()
    store.close()
    reader.close()
    assert found_in(sqlite_bytes(path)) == set()  # after the last checkpoint too
    _reads_back_whole(url, kek, runs)


@pytest.mark.postgres
def test_no_canary_is_stored_in_plaintext_in_any_postgres_table(
    pg_url: str, tmp_path: Path
) -> None:
    store = connect(pg_url)
    kek = b"p" * 32
    encrypted(store, kek)
    runs = write_everywhere(store, tmp_path)
    store.close()
    raw, tables = postgres_rows(pg_url)
    assert {"events", "blobs", "checkpoints", "signals", "schedules", "knowledge", "runs",
            "intake", "data_keys"} <= set(tables)
    assert found_in(raw) == set()
    _reads_back_whole(pg_url, kek, runs)


def test_without_encryption_the_same_writes_leave_every_canary_to_be_found(
    tmp_path: Path
) -> None:
    path = tmp_path / "plain.db"
    store = connect(f"sqlite:///{path}")
    write_everywhere(store, tmp_path)
    store.close()
    assert found_in(sqlite_bytes(path)) == set(CANARIES)
    assert found_in(sqlite_rows(path)) == set(CANARIES)


@pytest.mark.postgres
def test_without_encryption_postgres_shows_every_canary(pg_url: str, tmp_path: Path) -> None:
    store = connect(pg_url)
    write_everywhere(store, tmp_path)
    store.close()
    assert found_in(postgres_rows(pg_url)[0]) == set(CANARIES)
