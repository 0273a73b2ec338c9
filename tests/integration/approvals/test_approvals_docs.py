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
    assert len(blocks) == 5
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "verified",
        "Pay ₹2,32,000.00 to Shakti Steel for PO-7",
        "moves ₹2,32,000.00 out of HDFC-OPS-0042",
        "an answer from procurement",
        "{'paid': 'PO-7'}",
        "{'warehouse': 'B'}",
    ]


def test_the_fragments_are_cut_from_the_example_that_runs() -> None:
    text = DOC.read_text()
    [example] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                 if "client.answer(" in b]
    fragments = re.findall(r"```py\n(.*?)```", text, re.S)
    assert len(fragments) == 2
    for fragment in fragments:
        lines = [line for line in fragment.splitlines() if line.strip() != "..."]
        assert "\n".join(lines) in example, fragment


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
