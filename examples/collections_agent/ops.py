"""Operating the example as an operator would: ``underway worker`` processes, the
``underway`` command line, and waiting for what the journal says."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from underway import events as ev
from underway.client import Client, RunState
from underway.errors import UnderwayError

from .app import DATA_ENV
from .brain import DAY_ENV, record_day

ROOT = Path(__file__).resolve().parents[2]
"""The directory ``examples.collections_agent`` is imported from (the worker's working
directory)."""
APP = "examples.collections_agent.app:app"
SETTLED = ("completed", "failed", "cancelled", "escalated", "dead")
"""Statuses in which a run goes nowhere without a person."""
T = TypeVar("T")


class CommandFailed(UnderwayError):
    """An ``underway`` command exited with an error; the message holds its output."""


def underway_command() -> list[str]:
    """How to run the ``underway`` command of this Python environment."""
    script = Path(sys.executable).with_name("underway")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from underway.cli import main; sys.exit(main())"]


def cli(*args: str, db: str | None = None,
        keyring: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``underway [--keyring FILE] ARGS [--db DB]``; raise :class:`CommandFailed`
    unless it succeeds."""
    keys = ["--keyring", str(keyring)] if keyring is not None else []
    cmd = [*underway_command(), *keys, *args, *(["--db", db] if db else [])]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise CommandFailed(f"`underway {' '.join(args)}` exited with {done.returncode}: "
                            f"{(done.stdout + done.stderr).strip()}")
    return done


def replay_unchanged(data: Path, db: str,
                     keyring: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``underway replay`` of every collections run against this same code, under the
    workers' config file and data directory, with ``--fail-on-change`` (exit 1 if a
    decision would change). Nothing else is passed: no environment, no day length."""
    env = {k: v for k, v in os.environ.items() if k != DAY_ENV} | {DATA_ENV: str(data)}
    keys = ["--keyring", str(keyring)] if keyring is not None else []
    cmd = [*underway_command(), *keys, "replay", "--config", str(data / "underway.toml"),
           "--db", db, "--flow", "collections", "--since", "2000-01-01", "--fail-on-change"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def worker_config(data: Path, *, day_seconds: float) -> Path:
    """Write the workers' ``underway.toml`` into ``data`` and record its day length there.
    ``underway replay`` and ``underway deploy check`` given this file (``--config``) and
    ``UNDERWAY_COLLECTIONS_DATA`` see what the workers saw: the same policy environment,
    the same instructions."""
    record_day(data, day_seconds)
    path = data / "underway.toml"
    path.write_text(
        "# The collections agent's workers read this file; so do replay and deploy check.\n"
        f"[worker]\napp = {APP!r}\nenvironment = \"prod\"\n")
    return path


def start_worker(db: str, data: Path, *, day_seconds: float, log: Path, concurrency: int = 10,
                 crash_after_effects: int | None = None,
                 keyring: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``underway worker`` for the collections agent, its output going to ``log``.

    ``crash_after_effects=N`` arms underway's fault injection: the process kills itself
    with SIGKILL right after its N-th tool call ran and before the journal recorded it.
    ``keyring``: the journal is encrypted with this keyring's key (``--keyring``).
    """
    config = worker_config(data, day_seconds=day_seconds)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    env |= {DATA_ENV: str(data), DAY_ENV: repr(day_seconds)}
    if crash_after_effects is not None:
        env |= {"UNDERWAY_CRASH_AFTER": str(crash_after_effects),
                "UNDERWAY_CRASH_POINTS": "effect.after_run"}
    cmd = [*underway_command(), "worker", "--config", str(config), "--db", db,
           "--concurrency", str(concurrency), "--poll", "0.1", "--grace", "10",
           *(["--keyring", str(keyring)] if keyring else [])]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """Stop a worker gracefully (SIGTERM); kill it if it does not stop in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def wait_for(check: Callable[[], T | None], *, what: str, timeout: float,
             poll: float = 0.1) -> T:
    """Poll ``check`` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:g}s waiting for {what}")
        time.sleep(poll)


def states(client: Client, tenant_id: str = "default") -> list[RunState]:
    """Every run of the tenant, folded from its journal."""
    return [client.state(r.run_id, tenant_id=tenant_id)
            for r in client.list_runs(tenant_id=tenant_id, limit=1000).runs]


def unfinished_call(client: Client, tool: str,
                    tenant_id: str = "default") -> tuple[str, ev.ToolStarted] | None:
    """A call of ``tool`` whose intent is journaled without an outcome, and its run."""
    for row in client.list_runs(tenant_id=tenant_id, limit=1000).runs:
        open_: dict[str, ev.ToolStarted] = {}
        for rec in client.history(row.run_id, tenant_id=tenant_id):
            e = rec.event
            if isinstance(e, ev.ToolStarted) and e.tool == tool:
                open_[e.key] = e
            elif isinstance(e, ev.ToolSucceeded | ev.ToolFailed | ev.ToolTimedOut):
                open_.pop(e.key, None)
        if open_:
            return row.run_id, next(iter(open_.values()))
    return None


def outcome(client: Client, run_id: str, key: str,
            tenant_id: str = "default") -> ev.Event | None:
    """The journaled outcome of the call with ``key``, once there is one."""
    for rec in client.history(run_id, tenant_id=tenant_id):
        e = rec.event
        if isinstance(e, ev.ToolSucceeded | ev.ToolFailed | ev.ToolTimedOut) and e.key == key:
            return e
    return None
