"""``underway worker`` sweeps by the config file's ``[retention]``: a real worker process
purges the finished runs past their period on its own schedule (at start, then every
``retention.every``) while it drives runs, writes the sweep to the log, and says how many
it purged when it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakes.retention_world import CANARIES, make_runs
from underway.cli import app as cli
from underway.client import Client
from underway.store import connect

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0


def until(proc: subprocess.Popen[bytes], condition: object, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():  # type: ignore[operator]
        if proc.poll() is not None:
            pytest.fail(f"the worker ended before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {PATIENCE_S} s")
        time.sleep(0.05)


def test_the_worker_sweeps_on_its_schedule(sqlite_url: str, tmp_path: Path) -> None:
    assert CliRunner().invoke(cli, ["db", "migrate", "--db", sqlite_url]).exit_code == 0
    store = connect(sqlite_url)
    runs = make_runs(store)
    config = tmp_path / "underway.toml"
    config.write_text(f'database = "{sqlite_url}"\n[worker]\napp = "config_app:app"\n'
                      'poll = 0.1\n[retention]\ncompleted = "30d"\nevery = "1h"\n')
    proc = subprocess.Popen([str(UNDERWAY), "worker", "--config", str(config)], cwd=HERE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ))
    try:
        until(proc, lambda: len(store.purged_runs("default")) == 2, "purge by the worker")
        # The worker drives runs all the while.
        with Client.connect(sqlite_url) as client:
            run_id, _ = client.start("mailer", None)
            until(proc, lambda: client.get_run(run_id).status == "completed", "a run done")
        [entry] = store.list_sweeps("default")
        assert entry.by.startswith("worker ") and entry.purged == 2
        text = Client(store).events(runs["letter"])
        assert not [c for c in CANARIES if c in repr(text)]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert "2 runs purged" in out.decode() and "forgotten" not in out.decode()
    store.close()


def test_the_worker_forgets_purged_runs_past_forget_after(sqlite_url: str,
                                                          tmp_path: Path) -> None:
    assert CliRunner().invoke(cli, ["db", "migrate", "--db", sqlite_url]).exit_code == 0
    store = connect(sqlite_url)
    runs = make_runs(store)
    config = tmp_path / "underway.toml"
    config.write_text(f'database = "{sqlite_url}"\n[worker]\napp = "config_app:app"\n'
                      'poll = 0.1\n[retention]\ncompleted = "30d"\nforget_after = "400d"\n'
                      'every = "1h"\n')
    proc = subprocess.Popen([str(UNDERWAY), "worker", "--config", str(config)], cwd=HERE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ))
    try:
        until(proc, lambda: len(store.forgotten_runs("default")) == 2, "forget by the worker")
        assert {f.run_id for f in store.forgotten_runs("default")} == {
            runs["letter"], runs["letter_ann"]}
        assert store.get_run("default", runs["letter"]) is None
        assert store.get_run("default", runs["waiting"]) is not None
        until(proc, lambda: store.list_sweeps("default")[0].finished_at is not None,
              "the sweep's end")
        [entry] = store.list_sweeps("default")
        assert entry.purged == 2 and entry.forgotten == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert "2 runs purged, 2 forgotten" in out.decode()
    store.close()
