"""docs/pydantic-ai.md's example runs as written, its fragment is the example's code, and
the integration's public names are what the page describes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import underway.integrations.pydantic_ai as pai

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "pydantic-ai.md"


def test_the_python_example_runs(tmp_path: Path) -> None:
    [block] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    script = tmp_path / "example.py"
    script.write_text(block)
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["Your order is shipped."]


def test_the_tools_fragment_is_the_example_agents() -> None:
    [fragment] = re.findall(r"```py\n(.*?)```", DOC.read_text(), re.S)
    example = (ROOT / "examples" / "pydantic_ai_agent" / "durable.py").read_text()
    for line in fragment.splitlines()[1:-1]:
        assert line.strip() in example, line


def test_every_public_name_is_on_the_page() -> None:
    text = DOC.read_text()
    for name in ("DurableAgent", "call_info"):
        assert name in pai.__all__ and f"`{name}" in text
