"""A database whose schema is newer than the code is refused, and never written to.

Invariant: every way of opening a store — ``connect()`` with or without migrating, the
store classes themselves, the knowledge base, and every CLI command that opens one —
refuses a database whose recorded schema version is newer than the newest migration this
code knows, with one line naming both versions (exit 2 on the CLI), and the database is
byte-for-byte the same afterwards (every table and row compared).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from insider import insider
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import Flow, connect
from underway.cli import app
from underway.errors import MigrationError
from underway.guard.approvals import generate_keypair, write_private_key
from underway.knowledge import open_knowledge
from underway.store import queries

FUTURE = 99


class Nothing(BaseModel):
    pass


flows = [Flow("future_probe", state=Nothing)]
"""A worker app for ``underway worker --app test_schema_version:flows``."""
ROUTES: dict[str, object] = {}
"""An empty routing table for ``underway events send``."""


def dialect(url: str) -> str:
    return "sqlite" if url.startswith("sqlite:") else "postgres"


def from_the_future(url: str) -> None:
    """A database migrated by a later underway: its version table says 99."""
    connect(url).close()
    with insider(url) as sql:
        sql.q("INSERT INTO underway_schema_version (version, name, applied_at) "
              "VALUES (?, ?, ?)", FUTURE, f"{FUTURE:04d}_from_the_future.sql", 0.0)


def refusal(url: str) -> tuple[str, str]:
    known = queries.latest_version(dialect(url))
    return f"version {FUTURE}", f"version {known}"


def test_connect_and_the_store_classes_refuse_it(db_url: str) -> None:
    from_the_future(db_url)
    with insider(db_url) as sql:
        before = sql.dump()
    found, known = refusal(db_url)
    openers = [
        lambda: connect(db_url),
        lambda: connect(db_url, migrate=False),
        lambda: open_knowledge(db_url),
        lambda: open_knowledge(db_url, migrate=False),
    ]
    if dialect(db_url) == "sqlite":
        from underway.store.sqlite import SQLiteStore

        openers.append(lambda: SQLiteStore(db_url.removeprefix("sqlite:///")))
    else:
        from underway.store.postgres import PostgresStore

        openers.append(lambda: PostgresStore(db_url))
    for open_ in openers:
        with pytest.raises(MigrationError) as refused:
            open_()
        message = str(refused.value)
        assert found in message and known in message and "\n" not in message, message
    with insider(db_url) as sql:
        assert sql.dump() == before


def test_a_database_of_this_version_still_opens(db_url: str) -> None:
    store = connect(db_url)
    try:
        assert store.schema_version() == queries.latest_version(dialect(db_url))
        assert store.migrate() == store.schema_version()
    finally:
        store.close()


def commands(tmp_path: Path) -> list[list[str]]:
    """Every CLI command that opens a store, with arguments it accepts."""
    pem, public = generate_keypair()
    key = tmp_path / "k.pem"
    write_private_key(key, pem)
    signed = ["--key", str(key), "--as", "alice"]
    return [
        ["db", "migrate"],
        ["runs", "ls"],
        ["runs", "show", "r-1"],
        ["runs", "events", "r-1"],
        ["runs", "signal", "r-1", "go"],
        ["runs", "cancel", "r-1", "--by", "ops"],
        ["runs", "resolve", "r-1", "--resolution", "failed", "--by", "ops"],
        ["runs", "resume", "r-1", "--by", "ops"],
        ["audit", "verify", "--all"],
        ["audit", "anchor", "--key", str(key), "--log", str(tmp_path / "anchors.jsonl")],
        ["worker", "--app", "test_schema_version:flows"],
        ["queues", "ls"],
        ["queues", "set", "q", "--max-concurrency", "1"],
        ["queues", "rm", "q"],
        ["schedules", "ls"],
        ["schedules", "add", "s", "--flow", "future_probe", "--cron", "* * * * *"],
        ["schedules", "rm", "s"],
        ["events", "send", "--entity", "e", "--type", "t", "--source", "s", "--key", "k",
         "--routes", "test_schema_version:ROUTES"],
        ["approvers", "add", "alice", "--public-key", public, "--role", "ops"],
        ["approvers", "ls"],
        ["approvers", "revoke", "alice"],
        ["approvals", "ls"],
        ["approvals", "show", "r-1"],
        ["approvals", "approve", "r-1", *signed],
        ["approvals", "reject", "r-1", *signed],
        ["approvals", "answer", "r-1", *signed, "--answer", "yes"],
        ["approvals", "resolve", "r-1", *signed, "--outcome", "failed"],
        ["knowledge", "purge"],
        ["knowledge", "rm", "rec-1"],
        ["usage"],
    ]


def test_every_command_that_opens_a_store_refuses_it_and_writes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    from_the_future(db_url)
    with insider(db_url) as sql:
        before = sql.dump()
    found, known = refusal(db_url)
    for argv in commands(tmp_path):
        result = CliRunner().invoke(app, [*argv, "--db", db_url])
        out = result.stdout + result.stderr
        # A runtime failure (1); a check that cannot be made says 2, never its finding's 1.
        assert result.exit_code == (2 if argv[:2] == ["audit", "verify"] else 1), (argv, out)
        assert out.startswith("underway: error: the database schema is at "), (argv, out)
        assert found in out and known in out, (argv, out)
        assert out.count("\n") == 1, (argv, out)
    with insider(db_url) as sql:
        assert sql.dump() == before
    assert not (tmp_path / "anchors.jsonl").exists()
