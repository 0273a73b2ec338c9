"""The README's flow example runs as written."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def test_readme_flow_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "waiting"
    again = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert again.stdout.strip() == "waiting"
    with sqlite3.connect(tmp_path / "followups.db") as db:
        (runs,) = db.execute("SELECT count(*) FROM runs").fetchone()
    assert runs == 1  # the same idempotency key started one run, not two


def test_readme_agent_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    agent = next(b for b in blocks if "uw.Agent(" in b)
    script = tmp_path / "agent.py"
    script.write_text(agent)
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["waiting issue_refund", "completed {'INR': 25000.0}"]
