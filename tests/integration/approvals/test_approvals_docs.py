"""docs/approvals.md's Python examples run as written (a step giving evidence and risks, and
signing from Python), and the public API is what it lists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import underway.guard.approvals
import underway.guard.approvals.notify

DOC = Path(__file__).parents[3] / "docs" / "approvals.md"


def test_the_python_examples_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "verified"


def test_the_public_names_are_pinned() -> None:
    assert sorted(underway.guard.approvals.__all__) == [
        "ApprovalCheck", "ApproverRecord", "SignedDecision", "generate_keypair",
        "load_private_key", "public_key_of", "register_approver", "sign_decision",
        "verify_decision", "write_private_key",
    ]
    assert sorted(underway.guard.approvals.notify.__all__) == [
        "ApprovalNotice", "LogNotifier", "MultiNotifier", "Notifier", "SmtpNotifier",
        "WebhookNotifier", "webhook_signature",
    ]
