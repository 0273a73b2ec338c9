"""docs/intake.md's maildir example runs as written and prints what the page says; run
again, the same mails act on nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parents[3] / "docs" / "intake.md"


def test_the_maildir_example_prints_what_the_page_says(tmp_path: Path) -> None:
    text = DOC.read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                if "MaildirIntake(client" in b)
    after = text.split(code, 1)[1].split("```", 1)[1]
    printed = re.findall(r"```\n(.*?)```", after, re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(code)

    def run() -> list[str]:
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert run() == printed.strip().splitlines() == [
        "acted r1@example.com started", "acted r2@example.com signalled"]
    assert run() == ["acted r1@example.com duplicate", "acted r2@example.com duplicate"]
    assert len(list((tmp_path / "support-inbox" / "cur").iterdir())) == 4
