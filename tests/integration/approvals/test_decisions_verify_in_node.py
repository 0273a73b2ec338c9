"""An auditor in another language verifies decisions signed by Python: the Node.js script
of docs/approvals.md, with Node's own Ed25519 and its own JCS (``JSON.stringify`` with
sorted keys), accepts every decision ``sign_decision`` makes, and refuses a tampered one,
a relabelled one and one signed before JCS."""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from underway.events import JSON
from underway.guard.approvals import SignedDecision, public_key_of, sign_decision

ROOT = Path(__file__).parents[3]
DOC = ROOT / "docs" / "approvals.md"
RECORDED = ROOT / "tests" / "fixtures" / "approval_decisions_v1.json"
CHARS = "aZ09 _-\"\\/\b\f\n\r\t\x00\x1f\x7f\u0080é\u2028\u20ac\ue000\ufb33\uffff😀𝄞"


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs' script, as written there."""
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: the independent verifier is a Node.js script",
                    pytrace=False)
    [script] = re.findall(r"```js\n(.*?)```", DOC.read_text(), re.S)
    path = tmp_path_factory.mktemp("auditor") / "verify-decision.mjs"
    path.write_text(script)
    return path


def audit(verifier: Path, public_key: str, decisions: list[str]) -> tuple[int, list[str]]:
    out = subprocess.run(["node", str(verifier), public_key], input="\n".join(decisions),
                         capture_output=True, text=True, timeout=60, check=False)
    assert not out.stderr, out.stderr
    return out.returncode, out.stdout.split()


def some_text(rng: random.Random) -> str:
    return "".join(rng.choice(CHARS) for _ in range(rng.randrange(0, 12)))


def some_number(rng: random.Random) -> float | int:
    pick = rng.randrange(4)
    if pick == 0:
        return rng.randrange(-(2 ** 53) + 1, 2 ** 53)
    if pick == 1:
        return rng.uniform(-1e6, 1e6)
    if pick == 2:
        return rng.random() * 10.0 ** rng.randrange(-30, 30)
    while True:  # any finite double, from its bits
        x: float = struct.unpack("<d", rng.randbytes(8))[0]
        if x == x and abs(x) != float("inf"):
            return x


def some_json(rng: random.Random, depth: int = 0) -> JSON:
    pick = rng.randrange(8 if depth < 3 else 5)
    if pick == 0:
        return None
    if pick == 1:
        return rng.random() < 0.5
    if pick == 2:
        return some_number(rng)
    if pick in (3, 4):
        return some_text(rng)
    if pick == 5:
        return [some_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {some_text(rng): some_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_every_decision_python_signs_verifies_in_node(verifier: Path) -> None:
    rng = random.Random(8785)
    key = Ed25519PrivateKey.generate()
    signed: list[SignedDecision] = []
    for i in range(300):
        decision = rng.choice(["approve", "reject", "answer", "resolve"])
        signed.append(sign_decision(
            key, request_id=f"apr:run-{i}:0:pay:0", run_id=f"run-{i}", tenant_id="acme",
            tool=rng.choice(["", "refund", "pay_supplier"]), args_hash=rng.randbytes(32).hex(),
            decision=decision, expires_at=rng.choice(
                [1767225600.0, 1767225600.123456, rng.uniform(1.7e9, 1.9e9), 1e16, 1e21]),
            approver_id=rng.choice(["alice", "bé 😀"]), comment=some_text(rng),
            answer=some_json(rng) if decision in ("answer", "resolve") else None,
        ))
    lines = [d.model_dump_json() for d in signed]
    code, verdicts = audit(verifier, public_key_of(key), lines)
    assert verdicts == ["valid"] * len(lines)
    assert code == 0

    # The same decisions, each changed after signing in one field: all refused.
    tampered = []
    for d in signed:
        wire: dict[str, Any] = json.loads(d.model_dump_json())
        field = rng.choice(["comment", "expires_at", "nonce", "decision", "answer"])
        wire[field] = {"comment": wire["comment"] + " ", "expires_at": wire["expires_at"] * 1.5,
                       "nonce": "0" * 32,
                       "decision": "reject" if wire["decision"] != "reject" else "approve",
                       "answer": [wire["answer"]]}[field]
        tampered.append(json.dumps(wire))
    code, verdicts = audit(verifier, public_key_of(key), tampered)
    assert verdicts == ["INVALID"] * len(tampered)
    assert code == 1

    # Another key, or a JCS decision relabelled as the old format: refused.
    code, verdicts = audit(verifier, public_key_of(Ed25519PrivateKey.generate()), lines[:5])
    assert (code, verdicts) == (1, ["INVALID"] * 5)
    relabelled = [json.dumps({**json.loads(line), "canon": None}) for line in lines[:5]]
    code, verdicts = audit(verifier, public_key_of(key), relabelled)
    assert (code, verdicts) == (1, ["INVALID"] * 5)


def test_the_script_takes_only_jcs_decisions(verifier: Path) -> None:
    # Decisions from before JCS verify in underway (tests/unit/approvals), but were signed
    # over Python's own JSON: the script refuses them rather than misjudge them.
    recorded = json.loads(RECORDED.read_text())
    lines = [json.dumps(r["decision"], ensure_ascii=False) for r in recorded["decisions"]]
    code, verdicts = audit(verifier, recorded["public_key"], lines)
    assert (code, verdicts) == (1, ["INVALID"] * len(lines))
