"""``underway runs bulk resume`` killed with SIGKILL in the middle, on SQLite and
PostgreSQL: each run is acted on once or not at all, and the same command run again
finishes the rest.

Nine runs die in an outage. A real ``underway runs bulk resume --yes`` process kills
itself at its 4th pass of a fault point: at ``bulk.before_action`` three resumes were
sent and the fourth was not; at ``bulk.after_action`` the fourth was sent too. The same
command, run again, sends the rest and nothing twice. A worker then finishes all nine,
each with exactly one journaled resume.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import underway as uw
from fakes import bulk_flows
from fakes.processes import CHILD_TIMEOUT_S
from underway import events as ev
from underway.control import RESUME
from underway.runner import Runner

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

UNDERWAY = Path(sys.executable).with_name("underway")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
KILL_AT = 4


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_url" if request.param == "postgres"
                                       else "sqlite_url"))


def bulk_resume(url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    return subprocess.run(
        [str(UNDERWAY), "runs", "bulk", "resume", "--flow", "brittle", "--by", "ops",
         "--yes", "--db", url],
        env={**base, **env}, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def sent(store: uw.Store, run_ids: list[str]) -> list[int]:
    """How many resumes wait in each run's inbox."""
    return [sum(s.name == RESUME for s in store.pending_signals("default", r))
            for r in run_ids]


@pytest.mark.parametrize(("point", "acted"), [("bulk.before_action", KILL_AT - 1),
                                              ("bulk.after_action", KILL_AT)])
def test_a_killed_bulk_resume_acts_once_per_run_and_a_rerun_finishes(
    store_url: str, point: str, acted: int,
) -> None:
    engine = uw.Engine(uw.connect(store_url), flows=bulk_flows.FLOWS)
    bulk_flows.OUTAGE[0] = True
    try:
        dead = [engine.start("brittle", {"sku": f"SKU-{i}"})[0] for i in range(9)]
        asyncio.run(Runner(engine).run_until_idle())
        assert {engine.client.get_run(r).status for r in dead} == {"dead"}

        killed = bulk_resume(store_url, {"UNDERWAY_CRASH_AFTER": str(KILL_AT),
                                         "UNDERWAY_CRASH_POINTS": point})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        counts = sent(engine.store, dead)
        assert sorted(counts) == [0] * (9 - acted) + [1] * acted

        again = bulk_resume(store_url, {})
        assert again.returncode == 0, again.stderr
        assert f"{9 - acted} sent, {acted} skipped, 0 failed of 9" in again.stdout
        assert sent(engine.store, dead) == [1] * 9

        bulk_flows.OUTAGE[0] = False
        asyncio.run(Runner(engine).run_until_idle())
        for run_id in dead:
            assert engine.client.get_run(run_id).status == "completed"
            history = [r.event for r in engine.journal.history("default", run_id)]
            assert [type(e) for e in history if isinstance(e, ev.RunResumed)] == [
                ev.RunResumed]
            assert not any(isinstance(e, ev.SignalIgnored) for e in history)
    finally:
        engine.store.close()
