"""The project's examples pass ``underway drill``: one run under each fault (a worker
SIGKILLed at seeded points, a run started three times at once, expired credentials,
partial answers, slow dependencies), real worker processes, no effect executed twice and
no failure nobody was told of. (docs/drills.md shows the same commands.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
UNDERWAY = Path(sys.executable).with_name("underway")


@pytest.mark.parametrize(("app", "setup", "extra"), [
    ("invoice_followup.drill:app", "invoice_followup.drill:scenario", []),
    ("collections_agent.app:app", "collections_agent.drill:scenario", []),
    ("support.drill:app", "support.drill:scenario", ["--environment", "prod"]),
], ids=["invoice_followup", "collections_agent", "support"])
def test_each_example_passes_the_drill(app: str, setup: str, extra: list[str],
                                       sqlite_url: str) -> None:
    done = subprocess.run(
        [str(UNDERWAY), "drill", "--app", app, "--setup", setup, "--db", sqlite_url,
         "--runs", "5", "--seed", "1", "--json", *extra],
        cwd=EXAMPLES, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["findings"] == []
    assert (report["duplicates"], report["silent_failures"]) == (0, 0)
    assert report["runs"]["started"] == 5
    assert report["runs"]["unfinished"] == report["runs"]["waiting"] == 0
    faults = {f["fault"]: f for f in report["faults"]}
    assert faults["duplicates"]["reactions"] == {"3 starts made 1 run": 1}
    assert faults["crash"]["injected"] == report["kills"] >= 1
    assert faults["slow"]["injected"] >= 1
