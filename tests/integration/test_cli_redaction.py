"""Redaction and the access log at the command line: the KYC runs of
:mod:`fakes.sensitive_flows` (a PAN and a phone number in sensitive fields, an API token
typed as a secret). ``runs show|events`` and ``approvals ls|show`` print no canary unless
``--reveal`` (and never the secret); every read of run data, ``usage`` included, is in the
access log with who (``--by`` or the OS user), when and ``--purpose``; ``underway
access-log`` filters it and ``--verify`` names the first entry an attacker with the
database's rights deleted, altered or inserted, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import getpass
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from typer.testing import CliRunner

import underway as uw
from fakes.sensitive_flows import PAN, PHONE, SENSITIVE, TOKEN, kyc, leaks
from underway.cli import app
from underway.redaction import REDACTED
from underway.runner import Runner
from underway.store import Store, connect


@dataclass
class Kyc:
    url: str
    store: Store
    waiting: str
    dead: str


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def runs(request: pytest.FixtureRequest) -> Iterator[Kyc]:
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    store = connect(url)
    engine = uw.Engine(store, flows=[kyc])
    ids = [engine.client.start("kyc", {"fail": fail}, tenant_id="acme")[0]
           for fail in (False, True)]
    asyncio.run(Runner(engine).run_until_idle())
    yield Kyc(url, store, *ids)
    store.close()


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def reads(k: Kyc) -> list[list[str]]:
    """Every command that prints the runs' data."""
    found = [["approvals", "ls"], ["approvals", "ls", "--json"],
             ["approvals", "show", k.waiting], ["approvals", "show", k.waiting, "--json"],
             ["approvals", "show", k.dead]]
    for run_id in (k.waiting, k.dead):
        found += [["runs", "show", run_id], ["runs", "events", run_id],
                  ["runs", "events", run_id, "--json"]]
    return [[*args, "--tenant", "acme", "--db", k.url] for args in found]


def test_no_command_prints_a_canary_unless_revealed(runs: Kyc) -> None:
    for args in reads(runs):
        code, out, err = cli(*args)
        assert code == 0, (args, err)
        assert leaks(out + err) == [], args
        assert REDACTED in out or args[:2] == ["approvals", "ls"], args
    shown = ""
    for args in reads(runs):
        code, out, err = cli(*args, "--reveal")
        assert code == 0 and TOKEN not in out + err, args
        shown += out
    assert set(leaks(shown)) == set(SENSITIVE)
    _, out, _ = cli("runs", "events", runs.waiting, "--json", "--tenant", "acme",
                    "--db", runs.url)
    asked = next(e for e in json.loads(out) if e["type"] == "ApprovalRequested")["data"]
    assert asked["args"] == {"phone": REDACTED, "message": "KYC done", "api_token": REDACTED}
    _, out, _ = cli("approvals", "show", runs.waiting, "--reveal", "--tenant", "acme",
                    "--db", runs.url)
    assert PHONE in out and PAN in out and f'"api_token": "{REDACTED}"' in out


def test_every_read_is_in_the_access_log_with_who_and_why(runs: Kyc) -> None:
    db = ["--tenant", "acme", "--db", runs.url]
    assert cli("runs", "show", runs.waiting, "--purpose", "complaint 7", "--by", "alice",
               *db)[0] == 0
    assert cli("runs", "events", runs.dead, "--reveal", "--by", "alice", *db)[0] == 0
    assert cli("approvals", "show", runs.waiting, *db)[0] == 0
    assert cli("usage", "--purpose", "billing", *db)[0] == 0
    found = runs.store.list_access("acme")
    assert [(e.key_id, e.key_name, e.run_id, e.endpoint, e.purpose, e.revealed)
            for e in reversed(found)] == [
        ("cli", "alice", runs.waiting, "cli runs show", "complaint 7", False),
        ("cli", "alice", runs.dead, "cli runs events", "operations", True),
        ("cli", getpass.getuser(), runs.waiting, "cli approvals show", "operations", False),
        ("cli", getpass.getuser(), "*", "cli usage", "billing", False),
    ]
    code, out, _ = cli("access-log", "--who", "alice", *db)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and "revealed" in lines[0]
    assert f"{runs.waiting}  cli runs show  purpose='complaint 7'" in lines[1]
    _, out, _ = cli("access-log", "--purpose", "billing", "--json", *db)
    assert [(e["run_id"], e["key_name"]) for e in json.loads(out)] == [
        ("*", getpass.getuser())]
    _, out, _ = cli("access-log", "--run", runs.dead, "--json", *db)
    assert [e["endpoint"] for e in json.loads(out)] == ["cli runs events"]
    _, out, _ = cli("access-log", "--since", "2000-01-01", "--until", "2000-01-02", *db)
    assert out.startswith("no reads recorded")
    _, alias, _ = cli("apikeys", "access-log", "--who", "alice", *db)
    assert alias.splitlines() == lines


@pytest.mark.parametrize(("option", "problem"), [
    (["--purpose", ""], "must not be empty"), (["--purpose", "a\nb"], "control characters"),
    (["--purpose", "x" * 101], "at most 100"), (["--by", " "], "--by must name"),
])
def test_a_bad_purpose_or_reader_prints_nothing_and_logs_nothing(runs: Kyc, option: list[str],
                                                                  problem: str) -> None:
    code, out, err = cli("runs", "show", runs.waiting, *option, "--tenant", "acme",
                         "--db", runs.url)
    assert code == 2 and problem in err and out == ""
    assert runs.store.list_access("acme") == []


def _raw(runs: Kyc, *statements: str) -> None:
    """Run SQL as an attacker with the database's owner rights: triggers dropped first."""
    if runs.url.startswith("sqlite"):
        conn = sqlite3.connect(runs.url.removeprefix("sqlite:///"), isolation_level=None)
        for sql in ("DROP TRIGGER access_log_no_update", "DROP TRIGGER access_log_no_delete",
                    *statements):
            conn.execute(sql)
        conn.close()
        return
    base, schema = runs.url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'SET search_path TO "{schema}"')
        for sql in ("DROP TRIGGER access_log_no_change ON access_log", *statements):
            pg.execute(sql)


@pytest.mark.parametrize("attack", ["delete", "alter", "insert"])
def test_verify_names_the_first_entry_an_attacker_touched(runs: Kyc, attack: str) -> None:
    db = ["--tenant", "acme", "--db", runs.url]
    for n in range(5):
        assert cli("runs", "show", runs.waiting, "--by", f"user{n}", *db)[0] == 0
    code, out, _ = cli("access-log", "--verify", *db)
    assert code == 0 and "5 entries, chain intact" in out
    seqs = [e.seq for e in reversed(runs.store.list_access("acme"))]
    if attack == "delete":
        _raw(runs, f"DELETE FROM access_log WHERE seq = {seqs[1]}")
        bad = seqs[2]
    elif attack == "alter":
        _raw(runs, f"UPDATE access_log SET key_name = 'nobody' WHERE seq = {seqs[3]}")
        bad = seqs[3]
    else:
        _raw(runs, "INSERT INTO access_log (tenant_id, at, key_id, key_name, run_id, endpoint, "
             f"prev_hash, hash) SELECT tenant_id, at, key_id, 'mallory', run_id, endpoint, "
             f"prev_hash, hash FROM access_log WHERE seq = {seqs[4]}")
        bad = max(e.seq for e in runs.store.list_access("acme"))
    code, out, err = cli("access-log", "--verify", *db)
    assert code == 1 and f"broken at entry seq {bad}:" in err, err
    code, out, _ = cli("access-log", "--verify", "--json", *db)
    verdict = json.loads(out)
    assert code == 1 and (verdict["ok"], verdict["bad_seq"]) == (False, bad)
    code, _, err = cli("access-log", "--verify", "--run", runs.waiting, *db)
    assert code == 2 and "no filter" in err
