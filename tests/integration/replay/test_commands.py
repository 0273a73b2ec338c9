"""``underway replay``, ``underway runs fork`` and ``underway deploy check`` as a user runs
them, on the examples' recorded journals in a real database (SQLite, and PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from underway import Client
from underway import events as ev
from underway.store import connect

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "fakes"))
from recorded_journals import ROOT, load  # noqa: E402

UNDERWAY = Path(sys.executable).with_name("underway")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The examples' recorded journals, loaded into a fresh database."""
    url: str = (f"sqlite:///{tmp_path / 'journals.db'}" if request.param == "sqlite"
                else request.getfixturevalue("pg_url"))
    store = connect(url)
    for example in ("invoice_followup", "collections", "support"):
        load(store, example)
    store.close()
    return url


def underway(db: str, *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UNDERWAY_DB": db, "EXAMPLE_APP_DATA": str(tmp / "app"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp)]), "COLUMNS": "200"}
    env.pop("UNDERWAY_KEYRING", None)
    return subprocess.run([str(UNDERWAY), *args], cwd=HERE, env=env, capture_output=True,
                          text=True, timeout=120)


def run_of(db: str, flow: str, invoice: str | None = None) -> str:
    with Client.connect(db, migrate=False) as client:
        for row in client.list_runs(flow=flow).runs:
            first = client.history(row.run_id)[0].event
            if invoice is None or first.input["context"]["invoice_id"] == invoice:
                return row.run_id
    raise AssertionError(f"no run of {flow} about {invoice}")


def test_replay_shows_the_decisions_side_by_side(db: str, tmp_path: Path) -> None:
    run = run_of(db, "collections", "INV-2042")
    same = underway(db, "replay", run[:8], "--app", "example_apps:collections",
                    "--environment", "prod", tmp=tmp_path)
    assert same.returncode == 0, same.stderr
    # No config file, but an environment given: nothing to warn about.
    assert "no config file" not in same.stderr
    assert "replay of run" in same.stdout and same.stdout.rstrip().endswith(
        "no decision changed")
    assert "write_off" in same.stdout and "approval: needed, granted by priya" in same.stdout

    strict = tmp_path / "strict.toml"
    strict.write_text((ROOT / "examples/collections_agent/policy.toml").read_text().replace(
        'outcome = "require_approval"\napprover_role = "finance"\nexpires_in = 3600',
        'outcome = "deny"'))
    denied = underway(db, "replay", run, "--app", "example_apps:collections", "--environment",
                      "prod", "--policy", str(strict), "--json", tmp=tmp_path)
    assert denied.returncode == 0, denied.stderr
    out = json.loads(denied.stdout)
    assert out["changed"] and out["stopped"]["kind"] == "model"
    assert [c["kind"] for c in out["changes"]] == [
        "approval_dropped", "refused", "money", "diverged"]
    row = next(r for r in out["rows"] if "write_off" in r["original"])
    assert row["changed"] and "-> refused policy_denied" in row["replay"]


def test_replay_many_runs_fails_on_change_when_asked(db: str, tmp_path: Path) -> None:
    strict = tmp_path / "strict.toml"
    strict.write_text((ROOT / "examples/collections_agent/policy.toml").read_text().replace(
        'value = "5000"', 'value = "400"'))
    args = ["replay", "--flow", "collections", "--since", "2020-01-01", "--app",
            "example_apps:collections", "--environment", "prod", "--policy", str(strict)]
    found = underway(db, *args, tmp=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines()[:2] == [
        "replayed 3 runs of flow 'collections' (tenant 'default'): 1 would have decided "
        "differently",
        "  1 would have needed approval",
    ]
    failing = underway(db, *args, "--fail-on-change", tmp=tmp_path)
    assert failing.returncode == 1
    unchanged = underway(db, "replay", "--flow", "invoice_followup", "--since", "2020-01-01",
                         "--app", "example_apps:invoice_followup", "--fail-on-change",
                         tmp=tmp_path)
    assert unchanged.returncode == 0, unchanged.stderr
    # Without a config file the replay says which worker it decides as.
    assert "no config file, so the replay decides as a worker without one would " \
        "(no policy file; each run in the environment its journal records, else dev)" \
        in unchanged.stderr
    assert "0 would have decided differently" in unchanged.stdout


def test_replay_refuses_what_it_cannot_do(db: str, tmp_path: Path) -> None:
    run = run_of(db, "invoice_followup")
    cases = [
        (["replay", run, "--app", "example_apps:invoice_followup", "--on-divergence", "go"],
         "--on-divergence must be stop or stub"),
        (["replay", "--app", "example_apps:invoice_followup"], "give a RUN to replay"),
        (["replay", run, "--app", "example_apps:collections"],
         "the new code has no flow 'invoice_followup'"),
        (["replay", run, "--app", "example_apps:invoice_followup", "--model", "gpt"],
         "--model 'gpt' is not one of"),
        (["replay", "nope", "--app", "example_apps:invoice_followup"], "no run 'nope'"),
    ]
    for args, message in cases:
        out = underway(db, *args, tmp=tmp_path)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)


def test_fork_and_deploy_check_on_the_examples(db: str, tmp_path: Path) -> None:
    quiet = underway(db, "deploy", "check", "--app", "example_apps:invoice_followup",
                     tmp=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.startswith("checked 0 unfinished runs")

    run = run_of(db, "invoice_followup")
    with Client.connect(db, migrate=False) as client:
        fired = next(r.seq for r in client.history(run) if isinstance(r.event, ev.TimerFired))
    made = underway(db, "runs", "fork", run, "--at", str(fired - 1), "--by", "ops",
                    "--reason", "try the check again", "--app",
                    "example_apps:invoice_followup", "--json", tmp=tmp_path)
    assert made.returncode == 0, made.stderr
    fork: dict[str, Any] = json.loads(made.stdout)
    assert (fork["parent_run_id"], fork["step"], fork["parent_status"]) == (
        run, "check_payment", "waiting")
    with Client.connect(db, migrate=False) as client:
        assert client.state(fork["run_id"]).forked_from == run
        assert isinstance(client.history(run)[-1].event, ev.RunForked)

    ok = underway(db, "deploy", "check", "--app", "example_apps:invoice_followup",
                  tmp=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("checked 1 unfinished run ")

    (tmp_path / "renamed_app.py").write_text(RENAMED)
    broken = underway(db, "deploy", "check", "--app", "renamed_app:renamed", tmp=tmp_path)
    assert broken.returncode == 1, broken.stderr
    assert fork["run_id"] in broken.stdout and "step 'check_payment' is not in the new code" \
        in broken.stdout
    fixed = underway(db, "deploy", "check", "--app", "renamed_app:aliased", "--json",
                     tmp=tmp_path)
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["checked"] == 1


RENAMED = '''
import tempfile
from pathlib import Path

from underway import Flow
from examples.invoice_followup import flow as old


def _flow(alias):
    new = Flow("invoice_followup", state=old.FollowUpState, input=old.FollowUpInput)
    new.step(old.fetch_overdue, start=True)
    new.step(old.send_reminder)
    new.step(old.check_payment, name="verify_payment",
             aliases=["check_payment"] if alias else ())
    return [new, *old.make_tools(Path(tempfile.mkdtemp()))]


def renamed():
    return _flow(False)


def aliased():
    return _flow(True)
'''

