"""docs/agent.md's plan-and-extract example runs as written and prints what the page says,
and the class it describes has the options the page names."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

from underway.agent import PlanAndExtract

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "agent.md"


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index("## Plan and extract"):text.index("## Models")]


def test_the_worked_example_runs_and_prints_what_the_page_says(tmp_path: Path) -> None:
    text = section()
    [block] = re.findall(r"```python\n(.*?)```", text, re.S)
    [printed] = re.findall(r"```text\n(.*?)```", text, re.S)
    script = tmp_path / "example.py"
    script.write_text(block, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == printed.splitlines()


def test_the_options_the_page_names_exist_with_their_defaults() -> None:
    params = inspect.signature(PlanAndExtract).parameters
    text = section()
    for name in ("max_plan_attempts", "max_extract_attempts", "max_replans"):
        assert f"`{name}` ({params[name].default})" in text
    assert "untrusted=" in text and "untrusted" in params
