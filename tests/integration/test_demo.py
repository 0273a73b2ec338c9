"""`make demo` for real: a worker killed with SIGKILL mid-run, a fresh one resumes, and no
reminder goes out twice."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from underway.cli import app

DEMO = Path(__file__).resolve().parents[2] / "examples" / "invoice_followup" / "demo.py"


@pytest.mark.crash
def test_demo_survives_sigkill_without_sending_a_reminder_twice(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, str(DEMO), "--data", str(data)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr

    # The kill landed between the gateway accepting a reminder and the journal recording it,
    # and the resumed step settled that call from the outbox instead of sending again.
    assert "worker 1 killed (SIGKILL): the outbox accepted reminder" in out
    assert "step send_reminder, attempt 2 (again after an interruption)" in out
    assert "(outcome of the interrupted call, settled on resume)" in out
    assert re.search(r"hash chain of \d+ events verified: intact", out)
    assert "OK: run completed, 3 reminders, each sent exactly once" in out

    # The outbox on disk agrees: one message per overdue invoice, none twice.
    messages = [json.loads(line) for line in (data / "outbox.jsonl").read_text().splitlines()]
    assert sorted(m["to"] for m in messages) == [
        "ap@acme-tools.example", "billing@borealis.example", "finance@cobalt.example"
    ]
    assert set(Counter(m["key"] for m in messages).values()) == {1}
    outcomes = [json.loads(line) for line in (data / "collections.jsonl").read_text().splitlines()]
    assert [(o["invoice_id"], o["action"]) for o in outcomes] == [
        ("INV-1001", "escalate to collections"),
        ("INV-1002", "close"),
        ("INV-1003", "escalate to collections"),
    ]

    # The printed timeline is exactly what `underway runs show` prints for the run.
    run_id = re.search(r"starts run (\S+);", out)
    assert run_id is not None
    db = f"sqlite:///{data}/underway.db"
    shown = CliRunner().invoke(app, ["runs", "show", run_id.group(1), "--db", db])
    assert shown.exit_code == 0
    assert shown.stdout.strip() in out
    assert "status   completed" in shown.stdout
    verified = CliRunner().invoke(app, ["audit", "verify", "--db", db])
    assert verified.exit_code == 0, verified.stdout


def test_demo_refuses_a_data_directory_that_already_holds_a_journal(tmp_path: Path) -> None:
    (tmp_path / "underway.db").touch()
    done = subprocess.run(
        [sys.executable, str(DEMO), "--data", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "already holds a demo journal" in done.stderr
