"""``underway worker`` passes its guard options on: ``--environment`` and ``--policy``
decide calls, ``--secrets-env-prefix`` feeds tools their secrets, and
``--signed-resolutions`` refuses an unsigned ``underway runs resolve``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from underway import Engine, connect
from underway import events as ev
from underway.cli import app as cli

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0

POLICY = '''
version = "notices-1"
[[rules]]
id = "no-notices-in-prod"
outcome = "deny"
reason = "notices are not sent from production yet"
tools = ["send_notice"]
environments = ["prod"]

[[rules]]
id = "everything-else"
outcome = "allow"
tools = ["*"]
'''


def test_the_worker_applies_its_environment_policy_secrets_and_signed_resolutions(
    sqlite_url: str, tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    store = connect(sqlite_url)
    assert CliRunner().invoke(cli, ["db", "migrate", "--db", sqlite_url]).exit_code == 0
    sys.path.insert(0, str(HERE))
    try:
        from guarded_app import guarded
    finally:
        sys.path.remove(str(HERE))
    engine = Engine(store, flows=[guarded])
    run_id, _ = engine.start(guarded, None)

    log = tmp_path / "worker.log"
    with log.open("wb") as errors:
        worker = subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", sqlite_url, "--app", "guarded_app:app",
             "--poll", "0.1", "--environment", "prod", "--policy", str(policy),
             "--secrets-env-prefix", "UW_TEST_", "--signed-resolutions"],
            cwd=HERE, env={**os.environ, "UW_TEST_ERP_TOKEN": "t0ken-of-9"},
            stdout=subprocess.DEVNULL, stderr=errors,
        )
    try:
        def settled(kind: type[ev.Event]) -> bool:
            return any(isinstance(r.event, kind)
                       for r in engine.journal.history("default", run_id))

        deadline = time.monotonic() + PATIENCE_S
        while engine.state(run_id).status != "escalated":
            if time.monotonic() > deadline or worker.poll() is not None:
                pytest.fail(f"the run did not escalate: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        # The step stopped at its question, so its state is not committed; its calls are.
        lookup, notice, _ = engine.state(run_id).calls
        assert lookup.tool == "erp_lookup" and lookup.result == {"token_length": 10}
        assert notice.tool == "send_notice" and notice.error_type == "PolicyDenied"
        [decided] = [r.event for r in engine.journal.history("default", run_id)
                     if isinstance(r.event, ev.PolicyDecided) and r.event.tool == "send_notice"]
        assert decided.rule_id == "no-notices-in-prod" and decided.policy_version == "notices-1"

        out = CliRunner().invoke(cli, ["runs", "resolve", run_id, "--resolution", "succeeded",
                                       "--by", "ops", "--db", sqlite_url])
        assert out.exit_code == 0, out.output
        while not settled(ev.SignalIgnored):
            if time.monotonic() > deadline:
                pytest.fail(f"the resolve was not taken up: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        [ignored] = [r.event for r in engine.journal.history("default", run_id)
                     if isinstance(r.event, ev.SignalIgnored)]
        assert "unsigned resolution refused" in ignored.reason
        assert engine.state(run_id).status == "escalated"
        assert not settled(ev.EscalationResolved)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=PATIENCE_S)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        store.close()
    assert b"t0ken-of-9" not in b"".join(
        e.payload for e in connect(sqlite_url).load_events("default", run_id))


def test_a_dev_worker_is_refused_a_production_secret_and_the_refusal_is_journaled(
    sqlite_url: str, tmp_path: Path,
) -> None:
    config = tmp_path / "underway.toml"
    config.write_text(
        '[worker]\nenvironment = "dev"\nsecrets_env_prefix = "UW_TEST_"\n'
        '[secrets.environments]\nERP_TOKEN = "prod"\n')
    store = connect(sqlite_url)
    assert CliRunner().invoke(cli, ["db", "migrate", "--db", sqlite_url]).exit_code == 0
    sys.path.insert(0, str(HERE))
    try:
        from guarded_app import guarded
    finally:
        sys.path.remove(str(HERE))
    engine = Engine(store, flows=[guarded])
    run_id, _ = engine.start(guarded, None)
    log = tmp_path / "worker.log"
    with log.open("wb") as errors:
        worker = subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", sqlite_url, "--app", "guarded_app:app",
             "--poll", "0.1", "--config", str(config)],
            cwd=HERE, env={**os.environ, "UW_TEST_ERP_TOKEN": "pr0d-t0ken"},
            stdout=subprocess.DEVNULL, stderr=errors,
        )
    try:
        deadline = time.monotonic() + PATIENCE_S
        while engine.state(run_id).status not in ("dead", "failed", "escalated", "completed"):
            if time.monotonic() > deadline or worker.poll() is not None:
                pytest.fail(f"the run did not end: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        state = engine.state(run_id)
        assert state.status == "dead"  # a step's uncaught error: for an operator
        [lookup] = state.calls
        assert lookup.tool == "erp_lookup" and lookup.error_type == "SecretRefused"
        [refused] = [r.event for r in engine.journal.history("default", run_id)
                     if isinstance(r.event, ev.ToolRefused)]
        assert refused.cause == "secret_refused"
        assert "secret 'ERP_TOKEN' belongs to environment prod" in refused.reason
        assert "runs in 'dev'" in refused.reason
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=PATIENCE_S)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        store.close()
    assert b"pr0d-t0ken" not in b"".join(
        e.payload for e in connect(sqlite_url).load_events("default", run_id))
