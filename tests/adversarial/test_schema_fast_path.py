"""Opening a store whose schema is up to date reads its version and nothing else; an older
schema is still migrated, and a newer one still refused.

Invariant: ``connect`` on a database at the newest version reads no migration file (the
newest version comes from their names). On a database one migration behind, ``connect``
applies that migration and records it. ``migrate()`` on an open store whose version a
newer underway has since raised refuses it, and writes nothing.
"""

from __future__ import annotations

import sqlite3

import pytest
from insider import insider

from underway import connect
from underway.errors import MigrationError
from underway.store import queries


def dialect(url: str) -> str:
    return "sqlite" if url.startswith("sqlite:") else "postgres"


def one_behind(url: str) -> int:
    """Migrate ``url``'s fresh database to every migration but the last; the last's version."""
    latest = queries.latest_version(dialect(url))
    if dialect(url) == "postgres":
        store = connect(url, migrate=False)
        try:
            assert store.migrate(target=latest - 1) == latest - 1  # type: ignore[call-arg]
        finally:
            store.close()
        return latest
    named = queries.load("sqlite")
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        # As the store's own connection has it (SQLite builds unhex() only from 3.41).
        conn.create_function("unhex", 1, lambda t: None if t is None else bytes.fromhex(t))
        conn.execute(named["schema_version_table"])
        for version, name, text in queries.migrations("sqlite")[:-1]:
            conn.executescript(text)
            conn.execute(named["record_migration"], (version, name, 0.0))
    return latest


def recorded(url: str) -> list[int]:
    with insider(url) as sql:
        return [int(r[0]) for r in
                sql.q("SELECT version FROM underway_schema_version ORDER BY version")]


def test_an_up_to_date_store_opens_without_reading_a_migration(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect(db_url).close()

    def no_reading(dialect: str) -> list[tuple[int, str, str]]:
        raise AssertionError(f"a migration file of {dialect} was read")

    monkeypatch.setattr(queries, "migrations", no_reading)
    store = connect(db_url)
    try:
        assert store.schema_version() == queries.latest_version(dialect(db_url))
        assert store.migrate() == store.schema_version()
    finally:
        store.close()


def test_a_schema_one_migration_behind_is_migrated_on_open(db_url: str) -> None:
    latest = one_behind(db_url)
    assert recorded(db_url)[-1] == latest - 1
    store = connect(db_url)
    try:
        assert store.schema_version() == latest
    finally:
        store.close()
    assert recorded(db_url) == [v for v, _, _ in queries.migrations(dialect(db_url))]


def test_a_newer_schema_is_refused_by_migrate_after_opening(db_url: str) -> None:
    store = connect(db_url)
    try:
        with insider(db_url) as sql:
            sql.q("INSERT INTO underway_schema_version (version, name, applied_at) "
                  "VALUES (?, ?, ?)", 99, "0099_from_the_future.sql", 0.0)
            before = sql.dump()
        with pytest.raises(MigrationError) as refused:
            store.migrate()
        assert "version 99" in str(refused.value)
        with insider(db_url) as sql:
            assert sql.dump() == before
    finally:
        store.close()
