"""A run killed with SIGKILL and resumed still counts what it spent before the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from underway import events as ev
from underway.journal import Journal
from underway.store import connect

CHILD = Path(__file__).with_name("budget_child.py")


def _run(url: str, run_id: str, log: Path, crash_after: int | None) -> int:
    env = dict(os.environ)
    if crash_after is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after),
                   UNDERWAY_CRASH_POINTS="append.after_commit")
    proc = subprocess.run([sys.executable, str(CHILD), url, run_id, str(log)], env=env,
                          timeout=120, capture_output=True, text=True)
    return proc.returncode


@pytest.mark.crash
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@pytest.mark.parametrize("crash_after", [2, 3, 5])
def test_budget_survives_a_kill(backend: str, crash_after: int, request: pytest.FixtureRequest,
                                tmp_path: Path) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    run_id, log = str(uuid.uuid4()), tmp_path / "model.log"
    assert _run(url, run_id, log, crash_after) == -signal.SIGKILL
    store = connect(url)
    before = Journal(store).load("default", run_id)
    assert before.model_calls >= 1, "the killed process journaled some spending"
    assert _run(url, run_id, log, None) == 0
    after = Journal(store).load("default", run_id)
    history = [r.event for r in Journal(store).history("default", run_id)]
    # The limit held across both processes: 4 journaled model calls, then the budget stopped
    # the fifth before it was made (``used`` is the total it would have reached).
    assert after.status == "escalated"
    assert after.model_calls == 4 and after.cost_usd == pytest.approx(1.0)
    over = [e for e in history if isinstance(e, ev.BudgetExceeded)]
    assert len(over) == 1 and (over[0].metric, over[0].used, over[0].limit) == (
        "model_calls", 5.0, 4.0)
    assert after.messages == 4
    # A request in flight at the kill may have reached the model again, never more.
    physical = log.read_text().count("model")
    assert 4 <= physical <= 5
    store.close()
