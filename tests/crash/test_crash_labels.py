"""Labels across a worker SIGKILL, on SQLite and PostgreSQL.

A real worker process labels a run and is killed right after the mutating call's intent,
with the label, committed, before the call ran. A second process takes the run over and
runs the step again: the label it sets again is journaled once, the step's later label
follows, and the label index is exactly what the journal says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from underway import events as ev
from underway.journal import Journal
from underway.journal.projection import stored_labels
from underway.journal.state import RunState, fold
from underway.store import connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("labels_worker.py")
CHILD_TIMEOUT_S = 120.0
"""Against a hang only."""


def worker(url: str, *, crash: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash:
        env.update(UNDERWAY_CRASH_AFTER="1", UNDERWAY_CRASH_POINTS="effect.before_run")
    return subprocess.run([sys.executable, str(WORKER), "--db", url], env=env,
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_label_journaled_before_a_kill_is_kept_once(db: str,
                                                      request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    connect(url).close()
    killed = worker(url, crash=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = connect(url)
    try:
        (row,) = store.list_runs("default")
        # The intent committed with the label: the index has it before anything else ran.
        assert store.run_labels("default", [row.run_id])[row.run_id] == stored_labels(
            fold(Journal(store).history("default", row.run_id),
                 start=RunState(tenant_id="default", run_id=row.run_id)).lineage_record)
        assert {x.key: x.value for x in store.run_labels("default", [row.run_id])[
            row.run_id]} == {"po": "PO-7", "stage": "charging", "attempt_seen": "true"}
        done = worker(url, crash=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1])["charges"] == ["PO-7"]
        history = Journal(store).history("default", row.run_id)
        labeled = [r.event.labels for r in history if isinstance(r.event, ev.RunLabeled)]
        assert labeled == [{"attempt_seen": True, "stage": "charging"}, {"stage": "charged"}]
        state = fold(history, start=RunState(tenant_id="default", run_id=row.run_id))
        assert state.status == "completed"
        assert store.run_labels("default", [row.run_id])[row.run_id] == stored_labels(
            state.lineage_record)
        assert state.lineage.labels == {"po": "PO-7", "stage": "charged",
                                        "attempt_seen": True}
    finally:
        store.close()
