"""The example in docs/memory.md runs as written and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.postgres
def test_the_indic_examples_hold_on_every_backend(tmp_path: Path, pg_url: str) -> None:
    """Each line of the Indic section ending in ``# [...]`` evaluates to what it says, on
    memory, SQLite and PostgreSQL."""
    section = DOC.read_text().split("## Indic and other scripts")[1].split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    claim = re.compile(r"^(\S.*?)\s{2,}# (\[.*\])$")
    checks = 0
    code = []
    for block in blocks:
        for line in block.splitlines():
            found = claim.match(line)
            if found:
                code.append(f"assert ({found[1]}) == {found[2]}, {found[1]!r}")
                checks += 1
            else:
                code.append(line)
    assert checks == 6
    for url in ("memory://", f"sqlite:///{tmp_path / 'docs.db'}", pg_url):
        script = "\n".join([
            "import time",
            "from underway.knowledge import KnowledgeRecord, open_knowledge",
            f"knowledge = open_knowledge({url!r})",
            "now = time.time()",
            *code,
            "knowledge.close()",
        ])
        exec(compile(script, f"memory.md on {url.split(':')[0]}", "exec"), {})
