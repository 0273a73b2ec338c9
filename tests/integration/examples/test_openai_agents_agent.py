"""The refund desk example (an OpenAI Agents SDK agent run by underway) end to end, on
SQLite and on PostgreSQL: real worker processes, the second killed with SIGKILL while the
payments service held the refund it had just taken, signed approvals. The checks read the
payments service's book and the journal, not the printout alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from underway import connect
from underway import events as ev
from underway.journal import Journal

ROOT = Path(__file__).resolve().parents[3]
RUN = ROOT / "examples" / "openai_agents_agent" / "run.py"


@pytest.mark.crash
def test_the_refund_desk_survives_a_worker_killed_mid_refund(tmp_path: Path, db: str) -> None:
    data = tmp_path / "desk"
    done = subprocess.run([sys.executable, str(RUN), "--data", str(data), "--db", db],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "worker 2 killed (SIGKILL, exit -9)" in done.stdout
    report = json.loads((data / "report.json").read_text())
    # One refund, asked for once: the worker that took the run over asked the service
    # what happened instead of sending the refund again.
    assert [r["order_id"] for r in report["refunds"].values()] == ["1002"]
    assert len(report["refund_requests"]) == 1
    runs = report["runs"]
    assert runs["anita"]["result"] == "Order 1001 is shipped."
    assert runs["bharat"]["result"] == "Order 1002: refund R-1 of 2500 INR issued"
    assert "ApprovalRejected" in runs["chitra"]["result"]
    for who, run in runs.items():
        assert run["status"] == "completed" and run["verified"], who
        # No model request was repeated: one request per journaled response.
        assert sum(run["model_requests"].values()) == run["model_responses"], who
    store = connect(db)
    try:
        by_input = {}
        for row in store.list_runs("default"):
            history = [r.event for r in Journal(store).history("default", row.run_id)]
            started = history[0]
            assert isinstance(started, ev.RunStarted)
            by_input[started.input["input"]] = history
    finally:
        store.close()
    refund = by_input["Please refund order 1002."]
    [succeeded] = [e for e in refund if isinstance(e, ev.ToolSucceeded)
                   and e.tool == "issue_refund"]
    assert succeeded.reconciled and succeeded.key in report["refunds"]
    assert sum(isinstance(e, ev.ApprovalGranted) for e in refund) == 1
    rejected = by_input["Please refund order 1003."]
    assert sum(isinstance(e, ev.ApprovalRejected) for e in rejected) == 1
    assert not any(isinstance(e, ev.ToolStarted) for e in rejected)
