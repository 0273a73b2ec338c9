"""The example in docs/memory.md runs as written and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parents[3] / "docs" / "memory.md"


def test_the_recall_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    text = DOC.read_text()
    script = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    printed = re.findall(r"prints\n\n```text\n(.*?)```", text, re.S)[0]
    (tmp_path / "example.py").write_text(script)
    out = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == printed
