"""``underway drill`` against a flow made for it (``payapp.py``, a checkout against a real
local payment service) and the same flow written carelessly (``brokenapp.py``), with real
worker processes on SQLite and PostgreSQL.

The careful flow passes every fault: no effect twice (the drill's log of executions and the
service's own record agree), refused credentials refreshed and retried, partial answers
and slow answers settled by the idempotency key. The careless one fails the drill: a
swallowed 401 and an error body taken for a success are silent failures, and a reconcile
hook that guesses charges a card twice — each named in the report, exit status 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from underway.errors import ConfigurationError
from underway.ops.drills import FAULTS, Finding, parse_faults
from underway.ops.drills._inject import Logbook
from underway.ops.drills._report import _executed_twice

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")


def drill(*args: str, cwd: Path = HERE, env: dict[str, str] | None = None
          ) -> tuple[int, dict[str, Any] | None, str]:
    """Run ``underway drill ARGS --json``: exit status, the report, stderr."""
    done = subprocess.run([str(UNDERWAY), "drill", *args, "--json"], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return done.returncode, report, done.stderr


def drill_schemas(base: str) -> set[str]:
    with psycopg.connect(base) as conn:
        rows = conn.execute("SELECT schema_name FROM information_schema.schemata "
                            "WHERE schema_name LIKE 'underway_drill_%'").fetchall()
    return {r[0] for r in rows}


def own_database(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL database made for this test alone (dropped by the janitor): the drill's
    scratch schemas there are its own, whatever other suites run on the same server."""
    janitor = request.getfixturevalue("pg_janitor")
    base = request.getfixturevalue("pg_url").split("?")[0]
    name = f"underway_drill_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=60) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    request.addfinalizer(
        lambda: janitor.drop(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    return f"{base.rsplit('/', 1)[0]}/{name}"


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_careful_flow_passes_every_fault(kind: str, request: pytest.FixtureRequest,
                                          tmp_path: Path) -> None:
    db = request.getfixturevalue("sqlite_url") if kind == "sqlite" else own_database(request)
    base = db.split("?")[0]
    before = drill_schemas(base) if kind == "postgres" else set()
    record = tmp_path / "charges.json"
    code, report, err = drill("--app", "payapp:app", "--setup", "payapp:scenario",
                              "--db", db, "--runs", "10", "--seed", "3",
                              env={"PAYAPP_RECORD": str(record)})
    # The whole report on failure: what the drill found is the diagnosis.
    assert code == 0 and report is not None, (err, report)
    assert report["ok"] and report["findings"] == []
    assert report["runs"]["started"] == 10 and report["runs"]["completed"] == 10
    assert (report["duplicates"], report["silent_failures"]) == (0, 0)
    faults = {f["fault"]: f for f in report["faults"]}
    assert list(faults) == list(FAULTS)
    assert all(f["injected"] >= 1 for f in faults.values()), faults
    assert faults["credentials"]["reactions"] == {"refreshed and retried": 2}
    assert faults["duplicates"]["reactions"] == {"3 starts made 1 run": 2}
    assert report["kills"] == faults["crash"]["injected"] >= 1
    settled = {"retried with the same key", "reconciled"}
    assert set(faults["partial"]["reactions"]) <= settled, faults["partial"]
    # Under load the worker that met the delay may lose the run before it journals the
    # timeout; the next attempt answers in time ("succeeded"). Never a silent failure.
    assert set(faults["slow"]["reactions"]) <= settled | {"succeeded"}, faults["slow"]
    # The service's own record: every key charged once, whatever the drill did.
    charges = json.loads(record.read_text())
    assert charges and all(len(v) == 1 for v in charges.values()), charges
    if kind == "postgres":
        assert drill_schemas(base) == before, "the scratch schema was dropped"


def test_a_careless_flow_fails_the_drill_naming_each_problem(sqlite_url: str,
                                                             tmp_path: Path) -> None:
    record = tmp_path / "charges.json"
    code, report, err = drill("--app", "brokenapp:app", "--setup", "brokenapp:scenario",
                              "--db", sqlite_url, "--runs", "6",
                              "--only", "credentials,partial,slow",
                              env={"PAYAPP_RECORD": str(record)})
    assert code == 1 and report is not None, err
    assert not report["ok"]
    found = [(f["kind"], f["fault"], f["detail"]) for f in report["findings"]]
    swallowed = [d for k, f, d in found if (k, f) == ("silent", "credentials")]
    assert len(swallowed) == 2, found  # one charge per credentials run
    assert all("succeeded although the service refused its credentials" in d
               for d in swallowed)
    charged_twice = [d for k, f, d in found if (k, f) == ("duplicate", "slow")]
    assert charged_twice and all("charge (not idempotent) was executed 2 times" in d
                                 for d in charged_twice), found
    # The service agrees: the keys the drill names were charged twice.
    charges = json.loads(record.read_text())
    assert {k for k, v in charges.items() if len(v) > 1} == {
        d.rsplit(" ", 1)[1] for d in charged_twice}
    assert report["duplicates"] == len(charged_twice)
    assert report["silent_failures"] == sum(1 for k, _, _ in found if k == "silent")


def test_the_text_report_and_the_exit_status(sqlite_url: str) -> None:
    done = subprocess.run(
        [str(UNDERWAY), "drill", "--app", "brokenapp:app", "--setup", "brokenapp:scenario",
         "--db", sqlite_url, "--runs", "1", "--only", "credentials"],
        cwd=HERE, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "underway drill (seed 0, sqlite)" in out
    assert "credentials: silent failure x1" in out
    assert "SILENT (credentials)" in out and "FAILED" in out


def test_bad_requests_are_refused_before_anything_runs(sqlite_url: str) -> None:
    code, _, err = drill("--app", "payapp:app", "--db", sqlite_url, "--only", "crash,fire")
    assert code == 2 and "unknown fault 'fire'" in err and "choose from crash" in err
    code, _, err = drill("--app", "payapp:nothing", "--db", sqlite_url)
    assert code == 2 and "has no attribute 'nothing'" in err
    code, _, err = drill("--app", "payapp:app", "--db", "mysql://x/y")
    assert code == 2 and "sqlite:///... or postgresql://" in err
    code, _, err = drill("--app", "payapp:app", "--db", sqlite_url, "--input", "{nope")
    assert code == 2 and "--input is not JSON" in err
    with pytest.raises(ConfigurationError, match="names no fault"):
        parse_faults(" , ")
    assert parse_faults("slow,crash") == ("crash", "slow")


def test_effects_executed_twice_are_duplicates_only_for_tools_that_are_not_idempotent(
    tmp_path: Path,
) -> None:
    log = Logbook(tmp_path / "executions.jsonl")
    for tool, key, idempotent in [("charge", "r1:0:pay:0", False), ("charge", "r1:0:pay:0", False),
                                  ("note", "r1:0:pay:1", True), ("note", "r1:0:pay:1", True),
                                  ("charge", "r2:0:pay:0", False)]:
        log.append({"run": key.split(":")[0], "key": key, "tool": tool,
                    "idempotent": idempotent, "pid": 1})
    assert _executed_twice(log, {"r1": "crash", "r2": "crash"}) == [Finding(
        "duplicate", "crash", "r1", "charge (not idempotent) was executed 2 times with key "
        "r1:0:pay:0")]
