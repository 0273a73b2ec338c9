"""Numbered migrations: migrating an empty database gives exactly the schema the migration
files describe, migrating again changes nothing, and (on PostgreSQL) migrations applied
one at a time, or by two processes at once, end in the same schema."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import psycopg
import pytest
from psycopg import sql

from underway.store import queries
from underway.store.postgres import PostgresStore, split_url
from underway.store.sqlite import SQLiteStore

VERSION_TABLE = "underway_schema_version"


class Database(Protocol):
    """A fresh, empty database of one dialect that the test can inspect."""

    dialect: str

    def open(self) -> Any: ...

    def apply_files_raw(self) -> None: ...

    def catalogue(self) -> dict[str, Any]: ...

    def versions(self) -> list[tuple[int, str]]: ...


class SQLiteDatabase:
    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> SQLiteStore:
        return SQLiteStore(str(self.path))

    def apply_files_raw(self) -> None:
        with closing(sqlite3.connect(self.path)) as db:
            # The store gives its connections unhex() (SQLite has one from 3.41 on).
            db.create_function("unhex", 1, bytes.fromhex, deterministic=True)
            for _, _, text in queries.migrations("sqlite"):
                db.executescript(text)

    def catalogue(self) -> dict[str, Any]:
        with closing(sqlite3.connect(self.path)) as db:
            objects = db.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master "
                "WHERE name NOT LIKE 'sqlite_%' AND tbl_name != ? ORDER BY type, name",
                (VERSION_TABLE,),
            ).fetchall()
            tables = [name for kind, name, _, _ in objects if kind == "table"]
            columns = {
                t: db.execute(
                    'SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)',
                    (t,),
                ).fetchall()
                for t in tables
            }
        return {"objects": objects, "columns": columns}

    def versions(self) -> list[tuple[int, str]]:
        with closing(sqlite3.connect(self.path)) as db:
            rows = db.execute(f"SELECT version, name FROM {VERSION_TABLE} ORDER BY version")
            return [(int(v), str(n)) for v, n in rows]


class PostgresDatabase:
    dialect = "postgres"

    def __init__(self, base: str, schema: str) -> None:
        self.base, self.schema = base, schema
        self.url = f"{base}{'&' if '?' in base else '?'}schema={schema}"

    def open(self) -> PostgresStore:
        return PostgresStore(self.url)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.base, autocommit=True)
        conn.execute("SELECT set_config('search_path', %s, false)",
                     [sql.Identifier(self.schema).as_string(conn)])
        return conn

    def apply_files_raw(self) -> None:
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(self.schema)))
            for _, _, text in queries.migrations("postgres"):
                conn.execute(text)

    def catalogue(self) -> dict[str, Any]:
        with self._connect() as conn:
            columns = conn.execute(
                """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                          a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
                     FROM pg_attribute a
                     JOIN pg_class c ON c.oid = a.attrelid
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                    WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname != %s
                      AND a.attnum > 0 AND NOT a.attisdropped
                    ORDER BY c.relname, a.attnum""",
                (self.schema, VERSION_TABLE),
            ).fetchall()
            indexes = conn.execute(
                "SELECT tablename, indexname, replace(indexdef, %s, '') FROM pg_indexes "
                "WHERE schemaname = %s AND tablename != %s ORDER BY indexname",
                (f"{self.schema}.", self.schema, VERSION_TABLE),
            ).fetchall()
            constraints = conn.execute(
                """SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
                     FROM pg_constraint k
                     JOIN pg_class c ON c.oid = k.conrelid
                     JOIN pg_namespace n ON n.oid = k.connamespace
                    WHERE n.nspname = %s AND c.relname != %s
                    ORDER BY c.relname, k.conname""",
                (self.schema, VERSION_TABLE),
            ).fetchall()
        return {"columns": columns, "indexes": indexes, "constraints": constraints}

    def versions(self) -> list[tuple[int, str]]:
        with self._connect() as conn:
            rows = conn.execute(f"SELECT version, name FROM {VERSION_TABLE} ORDER BY version")
            return [(int(v), str(n)) for v, n in rows]


@pytest.fixture
def pg_databases(pg_url: str) -> Iterator[Callable[[], PostgresDatabase]]:
    """Makes databases in schemas that do not exist yet; drops them afterwards."""
    base, _ = split_url(pg_url)
    made: list[str] = []

    def make() -> PostgresDatabase:
        made.append(f"t_{uuid.uuid4().hex[:12]}")
        return PostgresDatabase(base, made[-1])

    yield make
    with psycopg.connect(base, autocommit=True) as conn:
        for schema in made:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def databases(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[], Database]:
    """Makes fresh, empty databases of each dialect."""
    if request.param == "postgres":
        make_pg: Callable[[], Database] = request.getfixturevalue("pg_databases")
        return make_pg
    counter = iter(range(1_000))
    return lambda: SQLiteDatabase(tmp_path / f"db{next(counter)}.sqlite")


def together(*calls: Callable[[], int]) -> list[int]:
    """Run the calls on threads of their own, released at the same moment."""
    gate = threading.Barrier(len(calls))

    def after_gate(call: Callable[[], int]) -> int:
        gate.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(after_gate, calls))


def latest(dialect: str) -> int:
    return max(version for version, _, _ in queries.migrations(dialect))


def migrate(db: Database, **options: Any) -> int:
    store = db.open()
    try:
        return int(store.migrate(**options))
    finally:
        store.close()


def test_migrating_an_empty_database_gives_the_schema_of_the_migration_files(
    databases: Callable[[], Database],
) -> None:
    migrated, described = databases(), databases()
    assert migrate(migrated) == latest(migrated.dialect)
    described.apply_files_raw()
    assert migrated.catalogue() == described.catalogue()
    assert migrated.catalogue()["columns"]  # the comparison saw real tables


def test_migrating_twice_changes_nothing(databases: Callable[[], Database]) -> None:
    db = databases()
    store = db.open()
    try:
        assert store.schema_version() == 0
        assert store.migrate() == latest(db.dialect)
        before, versions = db.catalogue(), db.versions()
        assert store.migrate() == latest(db.dialect)
        assert store.schema_version() == latest(db.dialect)
    finally:
        store.close()
    assert db.catalogue() == before
    assert db.versions() == versions
    assert versions == [(v, name) for v, name, _ in queries.migrations(db.dialect)]


def test_independently_migrated_databases_have_the_same_catalogue(
    databases: Callable[[], Database],
) -> None:
    first, second = databases(), databases()
    migrate(first)
    migrate(second)
    assert first.catalogue() == second.catalogue()


@pytest.mark.postgres
def test_postgres_migrated_step_by_step_equals_all_at_once(
    pg_databases: Callable[[], PostgresDatabase],
) -> None:
    stepwise, at_once = pg_databases(), pg_databases()
    store = stepwise.open()
    try:
        for version, _, _ in queries.migrations("postgres"):
            assert store.migrate(target=version) == version
            assert store.schema_version() == version
    finally:
        store.close()
    assert migrate(at_once) == latest("postgres")
    assert stepwise.catalogue() == at_once.catalogue()
    assert stepwise.versions() == at_once.versions()


@pytest.mark.postgres
def test_two_processes_migrating_one_postgres_schema_both_succeed(
    pg_databases: Callable[[], PostgresDatabase],
) -> None:
    reference = pg_databases()
    migrate(reference)
    for _ in range(3):
        db = pg_databases()  # its schema does not exist yet: both race to create it too
        stores = [db.open(), db.open()]
        try:
            results = together(*(store.migrate for store in stores))
        finally:
            for store in stores:
                store.close()
        assert results == [latest("postgres")] * 2
        assert db.versions() == reference.versions()
        assert db.catalogue() == reference.catalogue()
