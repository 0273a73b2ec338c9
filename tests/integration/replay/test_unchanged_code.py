"""The property a change gate needs: ``underway replay`` and ``underway deploy check`` of
unchanged code, under the unchanged config file, report no change and exit 0 on every
journal — approvals granted, rejected and expired; signals in time, late and never;
retries and dead runs; crashes taken over (a worker process SIGKILLed among them);
escalations; children; agents; forks; cancels. The
journals come from :mod:`corpus`, with hypothesis choosing each scenario's parameters,
on SQLite and PostgreSQL; the commands run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from underway import Client

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "fakes"))
from corpus import SECRET, Scenario, killed, produce, write_config  # noqa: E402
from guard_helpers import Approver  # noqa: E402

UNDERWAY = Path(sys.executable).with_name("underway")
FLOWS = ("purchase", "fulfil", "lookup", "buyer")

scenarios = st.builds(
    Scenario,
    amount=st.sampled_from([300.0, 6000.0]),
    verdict=st.sampled_from(["approve", "reject", "expire"]),
    signal=st.sampled_from(["on_time", "late", "never"]),
    fail_quotes=st.integers(min_value=0, max_value=2),
    answer=st.booleans(),
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A URL of a fresh, empty database of each kind."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


def underway(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: in another process, without the supplier's secret,
    with nothing but the config file to say how the worker was set up."""
    env = {k: v for k, v in os.environ.items()
           if k not in (SECRET, "UNDERWAY_DB", "UNDERWAY_KEYRING")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return subprocess.run([str(UNDERWAY), *args, "--config", str(folder / "underway.toml")],
                          cwd=HERE, env=env, capture_output=True, text=True, timeout=300)


def test_unchanged_code_reports_no_change_on_every_journal(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET, "token-for-the-original-runs")
    made: dict[str, Scenario] = {}

    @settings(max_examples=6, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(scenarios)
    @example(Scenario(verdict="approve", signal="late"))
    @example(Scenario(verdict="reject", signal="on_time", fail_quotes=0, answer=False))
    @example(Scenario(verdict="approve", signal="never", fail_quotes=1))
    @example(Scenario(verdict="expire", signal="late", answer=False))
    @example(Scenario(amount=300.0, signal="late", fail_quotes=2, answer=False))
    def corpus(s: Scenario) -> None:
        for what, run_id in produce(tmp_path, db_url, s, Approver).items():
            made[run_id] = s
            assert what

    # A real SIGKILL of a worker process right after a tool ran, before the journal knew
    # (first: the worker processes would drive every due run of the database).
    sigkilled = killed(tmp_path, db_url, Approver)
    corpus()
    with Client.connect(db_url, migrate=False) as client:
        statuses = {r.run_id: r.status for f in FLOWS
                    for r in client.list_runs(flow=f, limit=1000).runs}
    # The corpus holds every kind of journal the property is about.
    assert {"completed", "waiting", "dead", "escalated", "cancelled"} <= set(
        statuses.values()), statuses

    replayed = 0
    for flow in FLOWS:
        out = underway(tmp_path, "replay", "--flow", flow, "--since", "2000-01-01",
                       "--limit", "1000", "--fail-on-change", "--json")
        assert out.returncode == 0, (flow, out.stdout[-3000:], out.stderr[-3000:])
        report = json.loads(out.stdout)
        assert report["errors"] == {}, report["errors"]
        for run in report["runs"]:
            where = (run["run_id"], made.get(run["run_id"]))
            assert not run["changed"] and run["changes"] == [], where
            # The worker's own policy held the same calls: nothing had to be assumed.
            assert run["assumed"] == [], where
            assert run["original"]["approvals"] == run["replay"]["approvals"], where
        replayed += report["replayed"]
    assert replayed == len(statuses) and statuses[sigkilled] == "completed"

    check = underway(tmp_path, "deploy", "check", "--json")
    assert check.returncode == 0, (check.stdout[-3000:], check.stderr[-3000:])
    found: dict[str, Any] = json.loads(check.stdout)
    assert found["broken"] == []
    unfinished = {r for r, st_ in statuses.items() if st_ not in ("completed", "failed",
                                                                    "cancelled")}
    assert found["checked"] == len(unfinished)
    stopped = {r["run_id"]: r["verdict"] for r in found["stopped"]}
    assert set(stopped) == {r for r in unfinished if statuses[r] in ("dead", "escalated")}
    # A purchase that died of its supplier's 503s resumes under the same code.
    dead = [r for r in unfinished if statuses[r] == "dead"]
    assert dead and all(stopped[r] == "resumes" for r in dead), stopped


def test_replay_decides_by_the_workers_config_unless_an_option_overrides_it(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET, "token-for-the-original-runs")
    runs = produce(tmp_path, db_url, Scenario(verdict="approve", signal="on_time"), Approver)
    with Client.connect(db_url, migrate=False) as client:
        held = [r.event for r in client.history(runs["purchase"])
                if r.event.type == "ApprovalRequested"]
    assert len(held) == 1  # the config's [policy] file held the order (in prod)

    same = underway(tmp_path, "replay", runs["purchase"], "--fail-on-change")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "approval: needed, granted by pat-" in same.stdout
    assert same.stdout.rstrip().endswith("no decision changed")

    # --environment overrides the file's. In dev the supplier's secret, bound to prod by
    # [secrets], is refused before the call: the run would have died.
    dev = underway(tmp_path, "replay", runs["purchase"], "--environment", "dev",
                   "--fail-on-change")
    assert dev.returncode == 1, dev.stdout + dev.stderr
    assert "would have ended differently (completed → dead)" in dev.stdout
    assert SECRET in dev.stdout, dev.stdout


def test_deploy_check_refuses_a_config_the_worker_would_refuse(tmp_path: Path) -> None:
    write_config(tmp_path, f"sqlite:///{tmp_path / 'journal.db'}")
    (tmp_path / "policy.toml").write_text('version = "broken"\n[[rules]]\nid = 3\n')
    out = underway(tmp_path, "deploy", "check")
    # Status 2: the check could not be made (never 1, which names runs that would break).
    assert out.returncode == 2, out.stdout + out.stderr
    assert "policy.toml" in out.stderr


def test_a_replay_decides_in_the_environment_the_journal_records(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET, "token-for-the-original-runs")
    runs = produce(tmp_path, db_url, Scenario(verdict="approve", signal="on_time"), Approver)
    with Client.connect(db_url, migrate=False) as client:
        decided = {r.event.environment for r in client.history(runs["purchase"])
                   if r.event.type == "PolicyDecided"}
    assert decided == {"prod"}  # each decision journals the environment it was made in

    # The same file without its environment: the replay decides in prod all the same, the
    # secret bound to prod read there, the held order held again.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "policy.toml").write_text((tmp_path / "policy.toml").read_text())
    (bare / "underway.toml").write_text(
        (tmp_path / "underway.toml").read_text().replace('environment = "prod"\n', ""))
    same = underway(bare, "replay", runs["purchase"], "--fail-on-change")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "approval: needed, granted by pat-" in same.stdout
    assert same.stdout.rstrip().endswith("no decision changed")
