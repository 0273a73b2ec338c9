"""Tombstones: what a purged event keeps, read back exactly, and every edit of it found —
its kept fields, time, digest, hashes, seq or type — by the check a verifier makes."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from underway.events import (
    SKELETON,
    Tombstone,
    is_tombstone,
    read_tombstone,
    skeleton,
)
from underway.events._tombstone import MARK

PREV, HASH = "a" * 64, "b" * 64
PAYLOAD = b'{"at":1.5,"data":{"tool":"mail","args":{"to":"ann@example.com"}},"seq":3}'


def stone(**changes: object) -> Tombstone:
    made = Tombstone.of(seq=3, type="ToolStarted", at=1.5, kept={"tool": "mail", "index": 0},
                        payload=PAYLOAD, prev=PREV, hash=HASH)
    return dataclasses.replace(made, **changes) if changes else made  # type: ignore[arg-type]


def test_a_tombstone_is_read_back_exactly() -> None:
    t = stone()
    stored = t.encode()
    assert is_tombstone(stored) and not is_tombstone(PAYLOAD)
    assert read_tombstone(stored) == t
    assert t.digest == hashlib.sha256(PAYLOAD).hexdigest()
    assert t.problem(seq=3, type="ToolStarted", prev=PREV, hash=HASH) is None
    assert b"ann@example.com" not in stored


@pytest.mark.parametrize(("edit", "found"), [
    ({"kept": {"tool": "wire", "index": 0}}, "seal"),
    ({"at": 2.5}, "seal"),
    ({"digest": "c" * 64}, "seal"),
    ({"prev": "c" * 64}, "follow the chain"),
    ({"hash": "c" * 64}, "hash differs"),
    ({"seq": 4}, "seq/type"),
    ({"type": "ToolSucceeded"}, "seq/type"),
])
def test_every_edit_of_a_tombstone_is_found(edit: dict[str, object], found: str) -> None:
    edited = read_tombstone(stone(**edit).encode())
    problem = edited.problem(seq=3, type="ToolStarted", prev=PREV, hash=HASH)
    assert problem is not None and found in problem


def test_an_edit_that_keeps_the_seal_is_found_by_where_the_tombstone_stands() -> None:
    t = stone()
    assert t.problem(seq=3, type="ToolStarted", prev="c" * 64, hash=HASH) is not None
    assert t.problem(seq=3, type="ToolStarted", prev=PREV, hash="c" * 64) is not None
    assert t.problem(seq=3, type="ToolSucceeded", prev=PREV, hash=HASH) is not None
    assert t.problem(seq=True, type="ToolStarted", prev=PREV, hash=HASH) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"seq":3}',
    MARK[:0] + json.dumps({"seq": "3", "type": "T", "at": 1, "kept": {}, "digest": "a" * 64,
                           "prev": "a" * 64, "hash": "a" * 64, "seal": "a" * 64}).encode(),
    json.dumps({"seq": 3, "type": "T", "at": 1, "kept": {}, "digest": "nothex",
                "prev": "a" * 64, "hash": "a" * 64, "seal": "a" * 64}).encode(),
])
def test_bytes_that_are_no_tombstone_are_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="tombstone"):
        read_tombstone(MARK + body)


def test_a_skeleton_keeps_only_what_is_named_and_plain() -> None:
    data = {"key": "r:0:go:0", "tool": "pay", "index": 0, "args": {"iban": "DE89..."},
            "args_hash": "f" * 64, "policy_decision": "allow", "sandbox_profile": None}
    assert skeleton("ToolStarted", data) == {
        "key": "r:0:go:0", "tool": "pay", "index": 0, "policy_decision": "allow",
        "sandbox_profile": None}
    assert skeleton("ToolSucceeded", {"tool": "pay", "counts": {"money.EUR": 12.5},
                                      "result": "ok"}) == {
        "tool": "pay", "counts": {"money.EUR": 12.5}}
    assert skeleton("ToolSucceeded", {"counts": {"x": "nested text"}}) == {}
    assert skeleton("SomethingNew", {"tool": "x"}) == {}


def test_no_skeleton_keeps_what_people_wrote_or_who_they_are() -> None:
    personal = {"input", "state", "args", "args_hash", "result", "message", "reason",
                "payload", "evidence", "decision", "answer", "comment", "by", "sender",
                "principal", "roles", "approver_id", "question", "context", "request",
                "response", "patch", "value", "plan", "error", "idempotency_key"}
    # Codes only: the policy's outcome (allow, deny, require_approval) and why a decision
    # was refused (malformed, bad_signature, ...), never a person's signed decision.
    assert {t: set(fields) & personal for t, fields in SKELETON.items()
            if set(fields) & personal} == {"ApprovalInvalid": {"reason"},
                                           "PolicyDecided": {"decision"},
                                           "ToolShadowed": {"decision"}}
