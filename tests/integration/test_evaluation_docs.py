"""docs/evaluation.md's drift example runs as written and prints what the page shows (but
the time the read took and the size of what it read), and `underway drift` says the same of
its database."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from underway.cli import app

PAGE = Path(__file__).parents[2] / "docs" / "evaluation.md"


def _timeless(text: str) -> str:
    """``text`` without what varies from run to run and version to version: the time the
    read took, and how many KiB the payloads it read took (the events' encoding)."""
    text = re.sub(r" in \d+\.\d\ds$", " in _s", text.strip(), flags=re.M)
    return re.sub(r"\([\d,.]+ KiB of payloads", "(_ KiB of payloads", text)


def test_the_drift_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    text = PAGE.read_text()
    example = re.search(r"```python\n(.*?)```\n+```\n(.*?)```", text, re.S)
    assert example is not None, "the page's drift example and its output"
    script = tmp_path / "drift_demo.py"
    script.write_text(example.group(1))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert _timeless(done.stdout) == _timeless(example.group(2))

    db = f"sqlite:///{tmp_path / 'drift-demo.db'}"
    shown = CliRunner().invoke(app, ["drift", "--db", db, "--until", "2027-02-15T08:00:00Z",
                                     "--fail-on-drift"])
    assert shown.exit_code == 1
    assert _timeless(shown.stdout) == _timeless(example.group(2))
