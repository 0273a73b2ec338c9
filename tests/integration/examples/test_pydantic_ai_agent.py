"""The pydantic-ai example end to end, on SQLite and on PostgreSQL: an unmodified
pydantic-ai agent in worker processes, the first killed with SIGKILL while the shop paid a
refund it asked for. Every check reads the shop's records or the journal."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from underway import connect
from underway import events as ev
from underway.journal import Journal

ROOT = Path(__file__).resolve().parents[3]
RUN = ROOT / "examples" / "pydantic_ai_agent" / "run.py"


@pytest.mark.crash
def test_refunds_survive_a_killed_worker_and_none_is_paid_twice(tmp_path: Path,
                                                                 db: str) -> None:
    data = tmp_path / "shop"
    done = subprocess.run([sys.executable, str(RUN), "--data", str(data), "--db", db],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "worker 1 killed (SIGKILL, exit -9)" in done.stdout
    assert "OK: 4 refunds, each paid once" in done.stdout

    shop = json.loads((data / "shop.json").read_text())
    paid = Counter(r["order"] for r in shop["refunds"].values())
    assert paid == {"A-1001": 1, "A-1002": 1, "A-1003": 1, "A-1004": 1}

    store = connect(db)
    journal = Journal(store)
    try:
        rows = store.list_runs("default", flow="refunds")
        assert len(rows) == 4
        reconciled = 0
        for row in rows:
            assert row.status == "completed"
            assert journal.verify("default", row.run_id).ok
            events = [r.event for r in journal.history("default", row.run_id)]
            # Three model responses, each journaled once; the run was carried on by a
            # second worker, which read them instead of asking again.
            assert sum(isinstance(e, ev.ModelResponded) for e in events) == 3
            assert sum(isinstance(e, ev.StepStarted) for e in events) >= 1
            [refund] = [e for e in events
                        if isinstance(e, ev.ToolSucceeded) and e.tool == "refund"]
            assert shop["attempts"][refund.key] == 1
            reconciled += refund.reconciled
            state = journal.load("default", row.run_id)
            assert str(state.result).startswith(f"Refunded {state.input['prompt'][-7:-1]}")
        # The refund the shop was paying when worker 1 died was settled by asking the shop.
        assert reconciled >= 1
    finally:
        store.close()
