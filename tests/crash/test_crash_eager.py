"""Eager start survives SIGKILL, on SQLite and PostgreSQL.

A worker process (``eager_worker.py``) starts runs that it leases to itself in each start's
own transaction, and is killed right after the first such start commits
(``start.eager_after_commit``): the run exists with its first event and a lease nobody
will use. A second worker process, starting the same runs by the same idempotency keys,
finds that run instead of creating another, leaves the lease alone while it lasts, takes
the run over once it has run out, and finishes every run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from eager_worker import STEPS, run_key

from underway import connect
from underway import events as ev
from underway.journal import Journal

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("eager_worker.py")
RUNS = 3
LEASE_TTL_S = 2.0
CHILD_TIMEOUT_S = 120.0
BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def run_worker(url: str, owner: str, *, crash_after: int | None = None
               ) -> dict[str, Any] | None:
    """Run one worker process to its end: its report, or None when it was SIGKILLed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env["UNDERWAY_CRASH_AFTER"] = str(crash_after)
        env["UNDERWAY_CRASH_POINTS"] = "start.eager_after_commit"
    cmd = [sys.executable, str(WORKER), "--db", url, "--owner", owner, "--runs", str(RUNS),
           "--lease-ttl", str(LEASE_TTL_S)]
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=CHILD_TIMEOUT_S)
    if proc.returncode == -signal.SIGKILL:
        return None
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    report: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_kill_right_after_an_eager_start_leaves_a_run_another_worker_finishes(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url: str = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    store = connect(url)
    try:
        assert run_worker(url, "crashed-worker", crash_after=1) is None
        [left] = store.list_runs("default")
        assert left.idempotency_key == run_key(0)
        # Committed with its lease, before anything ran: the start's one transaction.
        assert (left.status, left.last_seq) == ("ready", 1)
        assert (left.lease_owner, left.lease_token) == ("crashed-worker", 1)
        assert left.lease_expires_at is not None

        report = run_worker(url, "surviving-worker")
        assert report is not None
        assert report["created"] == {left.run_id: False, **{
            r.run_id: True for r in store.list_runs("default") if r.run_id != left.run_id}}
        # The surviving worker took the runs it created eagerly; the left one by a claim,
        # or by its own start of it when the dead worker's lease had run out by then (a
        # busy machine may start the second process that late): never while it held.
        assert report["eager_starts"] in (RUNS - 1, RUNS)
        journal = Journal(store)
        for row in store.list_runs("default"):
            assert row.status == "completed" and row.lease_owner is None
            assert journal.verify("default", row.run_id).ok
            state = journal.load("default", row.run_id)
            assert (state.steps_completed, state.result) == (STEPS, STEPS)
        taken = store.get_run("default", left.run_id)
        assert taken is not None and taken.lease_token == 2
        history = journal.history("default", left.run_id)
        first_step = next(r for r in history if isinstance(r.event, ev.StepStarted))
        # Taken over only once the dead worker's lease had run out.
        assert first_step.at >= left.lease_expires_at
        assert sum(isinstance(r.event, ev.RunStarted) for r in history) == 1
    finally:
        store.close()
