"""A worker killed with SIGKILL while a sandboxed command runs: the command dies with it,
and a fresh worker follows the unknown-outcome rules for the call.

The command is a ``sleep`` renamed to a unique marker, so the host's /proc tells whether
any process of it survived. After the kill, a new ``underway worker`` takes the run over:
a mutating, non-idempotent tool without a reconcile hook is not run again and the run
escalates naming it; an idempotent one runs again (and finds the file its first attempt
left in the shared workspace) and the run completes.

Under Docker the container outlives the killed worker's client (it is not the worker's
child): the next process to use the backend kills it, as the launcher it names is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sandbox_app import jobs

from fakes.docker_image import engine_reason, require_image
from underway import Engine, connect
from underway import events as ev
from underway.sandbox import docker
from underway.sandbox.escapes import marker, processes_with

pytestmark = pytest.mark.crash

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""How long a test waits for something to happen: a guard against hangs only."""


def wait_until(done: Callable[[], bool], what: str, log: Path) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        if time.monotonic() > deadline:
            said = log.read_text()[-3000:] if log.exists() else ""
            pytest.fail(f"timed out after {PATIENCE_S:g}s waiting for {what}; "
                        f"the workers said:\n{said}")
        time.sleep(0.02)


def worker(url: str, workspace: Path, log: Path,
           image: str | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "UNDERWAY_SANDBOX_WORKSPACE": str(workspace)}
    if image is not None:
        env["UNDERWAY_SANDBOX_IMAGE"] = image
    with log.open("ab") as errors:
        return subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", url, "--app", "sandbox_app:app", "--poll", "0.1",
             "--lease-ttl", "5"],
            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=errors,
        )


def sleeping(tag: str) -> list[int]:
    """Host pids of the command itself (its argv[0] is the marker), not of the sandbox
    processes that merely carry the marker in their arguments."""
    found = []
    for pid in processes_with(tag):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(tag.encode()):
                found.append(pid)
    return found


def gone_within(tag: str, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for the command's processes to go; kill and return any left
    (the host stays clean even when the test fails)."""
    deadline = time.monotonic() + seconds
    while (left := processes_with(tag)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize("tool", ["shell_once", "shell_again"])
@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_sigkilled_worker_leaves_no_sandboxed_process_and_recovery_follows_the_rules(
    backend: str, tool: str, sqlite_url: str, tmp_path: Path,
) -> None:
    image = None
    if backend == "docker":
        if (reason := engine_reason()) is not None:
            pytest.skip(f"no Docker engine here: {reason}")
        image = require_image()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tag = marker()
    command = (f"if [ -e started ]; then echo second-attempt; "
               f"else touch started; exec -a {tag} sleep 300; fi")
    store = connect(sqlite_url)
    engine = Engine(store, flows=[jobs])
    run_id, _ = engine.start(jobs, {"tool": tool, "command": command})

    log = tmp_path / "workers.log"
    first = worker(sqlite_url, workspace, log, image)
    try:
        wait_until(lambda: bool(sleeping(tag)), "the sandboxed command to start", log)
        assert (workspace / "started").exists()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=PATIENCE_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    if backend == "bwrap":
        left = gone_within(tag, PATIENCE_S)
        assert left == [], f"processes of the killed worker's sandbox survived: {left}"
    # A container outlives its SIGKILLed client until a reaper (the next process on this
    # host to use Docker, maybe another suite's) kills it: the assertions below say gone.

    second = worker(sqlite_url, workspace, log, image)
    try:
        wait_until(lambda: engine.state(run_id).status in ("escalated", "completed", "failed",
                                                            "dead"),
                   "the run to settle", log)
        state = engine.state(run_id)
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(timeout=PATIENCE_S)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
    events = [r.event for r in engine.journal.history("default", run_id)]
    started = [e for e in events if isinstance(e, ev.ToolStarted)]

    if backend == "docker":
        if tool == "shell_once":
            # The second worker never used Docker (the call escalated): the next process
            # that does kills the orphan (here, this one).
            docker.reap_orphans("docker")
        left = gone_within(tag, PATIENCE_S)
        assert left == [], f"the killed worker's container survived: {left}"

    if tool == "shell_once":
        assert state.status == "escalated", state
        assert state.escalation is not None and state.escalation.tool == "shell_once"
        assert "shell_once" in str(state.escalation.reason)
        assert len(started) == 1, "the non-idempotent command was not started again"
    else:
        assert state.status == "completed", state
        assert state.result["stdout"] == "second-attempt\n"
        assert state.result["exit_code"] == 0
        assert len(started) == 1, "the retry reuses the journaled intent and its key"
    store.close()
