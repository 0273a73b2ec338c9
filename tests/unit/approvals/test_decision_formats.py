"""Decisions are signed over RFC 8785 (JCS) under their own domain tag and ``canon``; the
decisions signed before JCS (recorded in tests/fixtures) verify as they always did; a
tampered decision fails in both formats; relabelling one format as the other fails."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from underway.errors import ConfigurationError
from underway.events import canonical_json
from underway.guard.approvals import (
    ApprovalCheck,
    ApproverRecord,
    SignedDecision,
    public_key_of,
    sign_decision,
    verify_decision,
)
from underway.guard.approvals.decision import DOMAIN, LEGACY_DOMAIN

NOW = 1_700_000_000.0
RECORDED = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "approval_decisions_v1.json").read_text())
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
ALICE = ApproverRecord("acme", "alice", public_key_of(KEY), ("finance", "ops"), NOW - 10)

# RFC 8785, appendix B: IEEE 754 doubles (hex) and their JCS text.
RFC_NUMBERS = {
    "0000000000000000": "0",
    "8000000000000000": "0",
    "0000000000000001": "5e-324",
    "8000000000000001": "-5e-324",
    "7fefffffffffffff": "1.7976931348623157e+308",
    "ffefffffffffffff": "-1.7976931348623157e+308",
    "4340000000000000": "9007199254740992",
    "c340000000000000": "-9007199254740992",
    "4430000000000000": "295147905179352830000",
    "44b52d02c7e14af5": "9.999999999999997e+22",
    "44b52d02c7e14af6": "1e+23",
    "44b52d02c7e14af7": "1.0000000000000001e+23",
    "444b1ae4d6e2ef4e": "999999999999999700000",
    "444b1ae4d6e2ef4f": "999999999999999900000",
    "444b1ae4d6e2ef50": "1e+21",
    "3eb0c6f7a0b5ed8c": "9.999999999999997e-7",
    "3eb0c6f7a0b5ed8d": "0.000001",
    "41b3de4355555553": "333333333.3333332",
    "41b3de4355555554": "333333333.33333325",
    "41b3de4355555555": "333333333.3333333",
    "41b3de4355555556": "333333333.3333334",
    "41b3de4355555557": "333333333.33333343",
    "becbf647612f3696": "-0.0000033333333333333333",
    "43143ff3c1cb0959": "1424953923781206.2",
}


def double(hex_bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(hex_bits))[0]
    return value


def sign(**changes: Any) -> SignedDecision:
    fields: dict[str, Any] = {
        "request_id": "q-1", "run_id": "r-1", "tenant_id": "acme", "tool": "", "args_hash": "",
        "decision": "answer", "expires_at": 1767225600.0, "approver_id": "alice",
        "comment": "", "answer": None, "nonce": "00" * 16,
    }
    return sign_decision(KEY, **{**fields, **changes})


def check_for(d: SignedDecision, role: str | None = None) -> ApprovalCheck:
    return ApprovalCheck(request_id=d.request_id, run_id=d.run_id, tenant_id=d.tenant_id,
                         tool=d.tool, args_hash=d.args_hash, required_role=role,
                         expires_at=d.expires_at)


def verify(d: SignedDecision, approver: ApproverRecord = ALICE, role: str | None = None
           ) -> str | None:
    return verify_decision(d, check=check_for(d, role), approver=approver, now=NOW)


def body(d: SignedDecision) -> bytes:
    return d.signed_bytes().removeprefix(DOMAIN)


# -- what is signed ------------------------------------------------------------------------
def test_a_new_decision_signs_these_exact_bytes() -> None:
    d = sign(tool="refund", args_hash="ab" * 32, decision="approve",
             comment="checked — « paid twice » ✓\n", answer={"z": [1, 2.5], "a": {"é": None}})
    assert d.canon == "jcs"
    assert d.signed_bytes() == (
        b"underway-approval-v2\n"
        b'{"answer":{"a":{"\xc3\xa9":null},"z":[1,2.5]},"approver_id":"alice",'
        b'"args_hash":"' + b"ab" * 32 + b'","canon":"jcs",'
        b'"comment":"checked \xe2\x80\x94 \xc2\xab paid twice \xc2\xbb \xe2\x9c\x93\\n",'
        b'"decision":"approve","expires_at":1767225600,"nonce":"' + b"00" * 16 + b'",'
        b'"request_id":"q-1","run_id":"r-1","tenant_id":"acme","tool":"refund"}'
    )
    assert verify(d) is None


@pytest.mark.parametrize(("bits", "text"), RFC_NUMBERS.items())
def test_rfc8785s_number_samples_encode_as_jcs(bits: str, text: str) -> None:
    value = double(bits)
    d = sign(answer={"n": value})
    assert f'"answer":{{"n":{text}}}'.encode() in body(d)
    assert verify(d) is None


@pytest.mark.parametrize(("expires_at", "text"), [
    (1767225600.0, "1767225600"), (1767225600.123456, "1767225600.123456"),
    (1767225600.5, "1767225600.5"), (1e16, "10000000000000000"), (1e21, "1e+21"),
    (9.999999999999997e-7, "9.999999999999997e-7"), (0.1, "0.1"),
])
def test_the_expiry_every_decision_carries_encodes_as_jcs(expires_at: float, text: str
                                                          ) -> None:
    d = sign(expires_at=expires_at)
    assert f'"expires_at":{text},'.encode() in body(d)
    assert verify_decision(d, check=check_for(d), approver=ALICE,
                           now=min(expires_at, NOW) / 2) is None


def test_rfc8785s_example_object_encodes_as_jcs() -> None:
    # RFC 8785, section 3.2.2 (input) and 3.2.3 (output).
    answer = json.loads(r'''{
      "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
      "literals": [null, true, false]
    }''')
    d = sign(answer=answer)
    want = (r'''{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,'''
            r'''0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}''')
    assert body(d).startswith(b'{"answer":' + want.encode() + b',"approver_id"')


def test_keys_sort_by_utf16_code_units_at_every_depth() -> None:
    # RFC 8785, section 3.2.3: an emoji (a surrogate pair) sorts before U+FB33.
    names = ["\u20ac", "\r", "\ufb33", "1", "\U0001F600", "\u0080", "\u00f6"]
    d = sign(answer={"outer": {n: i for i, n in enumerate(names)}, "nested": {"b": {"y": 1,
                                                                                   "x": 2}}})
    want = ('{"nested":{"b":{"x":2,"y":1}},"outer":{"\\r":1,"1":3,"\u0080":5,"\u00f6":6,'
            '"\u20ac":0,"\U0001F600":4,"\ufb33":2}}')
    assert body(d).startswith(b'{"answer":' + want.encode() + b",")
    # underway's own canonical JSON (code point order) puts the emoji last.
    assert canonical_json(d.answer).index("\U0001F600".encode()) > \
        canonical_json(d.answer).index("\ufb33".encode())
    assert verify(d) is None


def test_an_answer_jcs_cannot_hold_exactly_is_refused_before_signing() -> None:
    with pytest.raises(ConfigurationError, match=r"past 2\*\*53 as a string"):
        sign(answer={"big": 2 ** 53})
    with pytest.raises(ConfigurationError, match="not plain JSON"):
        sign(answer="lone \ud800 surrogate")
    assert verify(sign(answer={"big": 2 ** 53 - 1, "small": -(2 ** 53 - 1)})) is None


# -- decisions signed before JCS ----------------------------------------------------------
def recorded() -> list[tuple[str, SignedDecision, str | None]]:
    return [(r["what"], SignedDecision.model_validate(r["decision"]), r["required_role"])
            for r in RECORDED["decisions"]]


RECORDER = ApproverRecord(RECORDED["tenant_id"], RECORDED["approver_id"],
                          RECORDED["public_key"], tuple(RECORDED["roles"]), NOW - 10)


def test_decisions_signed_before_jcs_still_verify() -> None:
    found = recorded()
    assert len(found) == 4
    for what, d, role in found:
        assert d.canon is None, what
        assert d.signed_bytes().startswith(LEGACY_DOMAIN), what
        assert verify(d, RECORDER, role) is None, what
        # After a trip through JSON, where ``canon`` is written as null, still.
        again = SignedDecision.model_validate_json(d.model_dump_json())
        assert verify(again, RECORDER, role) is None, what


def test_the_two_formats_write_the_recorded_decisions_differently() -> None:
    # Why a new tag was needed: the same fields, other bytes.
    for what, d, _ in recorded():
        jcs = d.model_copy(update={"canon": "jcs"})
        if d.decision == "answer":
            with pytest.raises(ValueError):  # an integer past 2**53 in the answer
                jcs.signed_bytes()
            continue
        assert d.signed_bytes().removeprefix(LEGACY_DOMAIN) != body(jcs), what


# -- tampering and relabelling ------------------------------------------------------------
TAMPERINGS: list[dict[str, Any]] = [
    {"comment": "approved by the CFO"}, {"expires_at": 1767225601.0},
    {"nonce": "11" * 16}, {"answer": {"resolution": "failed", "result": None}},
    {"approver_id": "alice "},
]


@pytest.mark.parametrize("change", TAMPERINGS, ids=lambda c: next(iter(c)))
def test_a_tampered_decision_fails_in_either_format(change: dict[str, Any]) -> None:
    fresh = sign(decision="resolve", answer={"resolution": "succeeded", "result": 1})
    [(_, old, role)] = [r for r in recorded() if r[1].decision == "resolve"]
    for d, approver, required in ((fresh, ALICE, None), (old, RECORDER, role)):
        tampered = d.model_copy(update=change)
        check = check_for(d, required)
        who = ApproverRecord(approver.tenant_id, tampered.approver_id, approver.public_key,
                             approver.roles, approver.created_at)
        assert verify_decision(tampered, check=check, approver=who, now=NOW) == \
            "bad_signature", (d.canon, change)


def test_a_jcs_decision_relabelled_as_the_old_format_fails() -> None:
    d = sign(tool="refund", args_hash="ab" * 32, decision="approve")
    assert verify(d) is None
    as_old = SignedDecision.model_validate({**d.model_dump(mode="json"), "canon": None})
    assert verify(as_old) == "bad_signature"
    wire = d.model_dump(mode="json")
    del wire["canon"]
    assert verify(SignedDecision.model_validate(wire)) == "bad_signature"


def test_an_old_decision_relabelled_as_jcs_fails() -> None:
    for what, d, role in recorded():
        relabelled = SignedDecision.model_validate({**d.model_dump(mode="json"),
                                                    "canon": "jcs"})
        assert verify(relabelled, RECORDER, role) == "bad_signature", what


def test_the_formats_never_share_signed_bytes() -> None:
    # Even fields that both formats write alike sign different bytes: each format has its
    # own domain tag, and JCS signs its own ``canon``.
    d = sign(expires_at=1767225600.5)
    old = d.model_copy(update={"canon": None})
    assert body(d).replace(b'"canon":"jcs",', b"") == \
        old.signed_bytes().removeprefix(LEGACY_DOMAIN)
    assert d.signed_bytes() != old.signed_bytes()
    assert DOMAIN != LEGACY_DOMAIN


def test_an_unknown_format_is_not_a_decision() -> None:
    wire = sign().model_dump(mode="json")
    with pytest.raises(ValidationError):
        SignedDecision.model_validate({**wire, "canon": "cbor"})
