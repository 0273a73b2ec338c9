"""A signed decision is accepted only for the exact request, run, tenant, tool and
arguments it names, by a registered, unrevoked approver holding the required role, with an
untouched signature, before it expires."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest
import rfc8785

from underway.errors import ConfigurationError
from underway.events import canonical_json
from underway.guard.approvals import (
    ApprovalCheck,
    ApproverRecord,
    SignedDecision,
    generate_keypair,
    sign_decision,
    verify_decision,
)
from underway.guard.approvals.decision import DOMAIN, REASONS

NOW = 1_700_000_000.0
EXPIRES = NOW + 3600


def keypair() -> tuple[Any, str]:
    from cryptography.hazmat.primitives import serialization

    pem, public = generate_keypair()
    return serialization.load_pem_private_key(pem, password=None), public


ALICE_KEY, ALICE_PUBLIC = keypair()
MALLORY_KEY, MALLORY_PUBLIC = keypair()

ALICE = ApproverRecord("acme", "alice", ALICE_PUBLIC, ("finance", "ops"), NOW - 10)
CHECK = ApprovalCheck(
    request_id="req-1", run_id="run-1", tenant_id="acme", tool="refund",
    args_hash="a" * 64, required_role="finance", expires_at=EXPIRES,
)


def signed(key: Any = ALICE_KEY, **changes: Any) -> SignedDecision:
    fields: dict[str, Any] = {
        "request_id": "req-1", "run_id": "run-1", "tenant_id": "acme", "tool": "refund",
        "args_hash": "a" * 64, "decision": "approve", "expires_at": EXPIRES,
        "approver_id": "alice", "comment": "ok",
    }
    fields.update(changes)
    return sign_decision(key, **fields)


def verify(d: SignedDecision, *, approver: ApproverRecord | None = ALICE,
           check: ApprovalCheck = CHECK, now: float = NOW) -> str | None:
    return verify_decision(d, check=check, approver=approver, now=now)


def test_a_decision_signed_by_the_registered_approver_is_valid() -> None:
    d = signed()
    assert verify(d) is None
    assert d.decision == "approve" and d.approver_id == "alice"
    assert len(d.nonce) == 32 and int(d.nonce, 16) >= 0  # 128 random bits, hex


def test_a_decision_survives_the_trip_through_json() -> None:
    d = signed(comment="fine by me", answer={"amount": 12.5, "notes": ["a", "b"]})
    wire = canonical_json(d.model_dump(mode="json"))
    again = SignedDecision.model_validate_json(wire)
    assert verify(again) is None


def test_every_decision_has_a_fresh_nonce() -> None:
    assert signed().nonce != signed().nonce
    assert signed(nonce="fixed").nonce == "fixed"


def test_the_signature_covers_every_field_behind_a_domain_tag() -> None:
    d = signed()
    body = d.model_dump(mode="json", exclude={"signature"})
    assert d.canon == "jcs" and body["canon"] == "jcs"
    assert d.signed_bytes() == DOMAIN + rfc8785.dumps(body)
    assert d.signed_bytes().startswith(b"underway-approval-v2\n")


def test_no_approver_is_unknown_approver() -> None:
    assert verify(signed(), approver=None) == "unknown_approver"


def test_a_record_for_someone_else_is_unknown_approver() -> None:
    bob = dataclasses.replace(ALICE, approver_id="bob")
    assert verify(signed(), approver=bob) == "unknown_approver"


def test_a_revoked_approver_is_refused_even_for_an_earlier_signature() -> None:
    d = signed()
    revoked = dataclasses.replace(ALICE, revoked_at=NOW - 1)
    assert verify(d, approver=revoked) == "revoked"


def test_another_tenants_approver_is_refused() -> None:
    elsewhere = dataclasses.replace(ALICE, tenant_id="globex")
    assert verify(signed(), approver=elsewhere) == "wrong_tenant"


def test_a_decision_naming_another_tenant_is_refused() -> None:
    assert verify(signed(tenant_id="globex")) == "wrong_tenant"


def test_a_key_registered_in_another_tenant_cannot_approve_here() -> None:
    # Mallory is a real approver of globex; her valid signature means nothing in acme.
    mallory = ApproverRecord("globex", "alice", MALLORY_PUBLIC, ("finance",), NOW)
    d = signed(MALLORY_KEY, tenant_id="globex")
    assert verify(d, approver=mallory) == "wrong_tenant"


def test_a_decision_for_another_request_is_refused() -> None:
    assert verify(signed(request_id="req-2")) == "wrong_request"


def test_a_decision_for_another_run_is_refused() -> None:
    assert verify(signed(run_id="run-2")) == "wrong_run"


def test_a_decision_for_another_tool_is_refused() -> None:
    assert verify(signed(tool="delete_account")) == "wrong_tool"


def test_a_decision_for_other_arguments_is_refused() -> None:
    assert verify(signed(args_hash="b" * 64)) == "args_mismatch"


def test_an_approver_without_the_required_role_is_refused() -> None:
    ops_only = dataclasses.replace(ALICE, roles=("ops",))
    assert verify(signed(), approver=ops_only) == "missing_role"


def test_a_request_without_a_required_role_accepts_any_approver() -> None:
    no_roles = dataclasses.replace(ALICE, roles=())
    assert verify(signed(), approver=no_roles,
                  check=dataclasses.replace(CHECK, required_role=None)) is None


def test_a_byte_flipped_signature_is_refused() -> None:
    d = signed()
    raw = bytearray(base64.b64decode(d.signature))
    raw[7] ^= 0x01
    flipped = d.model_copy(update={"signature": base64.b64encode(bytes(raw)).decode()})
    assert verify(flipped) == "bad_signature"


def test_a_signature_by_the_wrong_key_is_refused() -> None:
    assert verify(signed(MALLORY_KEY)) == "bad_signature"


@pytest.mark.parametrize("field,value", [
    ("comment", "approved, but only half"),
    ("decision", "reject"),
    ("nonce", "0" * 32),
    ("answer", {"amount": 1_000_000}),
])
def test_a_field_changed_after_signing_breaks_the_signature(field: str, value: Any) -> None:
    tampered = signed().model_copy(update={field: value})
    assert verify(tampered) == "bad_signature"


def test_an_expiry_moved_after_signing_breaks_the_signature() -> None:
    tampered = signed(expires_at=EXPIRES - 60).model_copy(update={"expires_at": EXPIRES})
    assert verify(tampered) == "bad_signature"


@pytest.mark.parametrize("signature", ["", "not base64!", "AAAA", "=" * 8, "ü"])
def test_a_malformed_signature_is_refused(signature: str) -> None:
    assert verify(signed().model_copy(update={"signature": signature})) == "bad_signature"


def test_a_malformed_registered_key_fails_as_bad_signature() -> None:
    broken = dataclasses.replace(ALICE, public_key="bm90IGEga2V5")
    assert verify(signed(), approver=broken) == "bad_signature"


def test_a_decision_is_expired_at_the_requests_expiry() -> None:
    d = signed()
    assert verify(d, now=EXPIRES - 0.001) is None
    assert verify(d, now=EXPIRES) == "expired"


def test_a_decision_is_expired_at_its_own_earlier_expiry() -> None:
    d = signed(expires_at=NOW + 60)
    assert verify(d, now=NOW + 59) is None
    assert verify(d, now=NOW + 60) == "expired"


def test_a_decision_may_not_outlive_its_request() -> None:
    assert verify(signed(expires_at=EXPIRES + 1)) == "decision_expiry_mismatch"


def test_checks_run_in_the_documented_order() -> None:
    # Wrong in every way at once: the first check named is the reason given.
    d = signed(MALLORY_KEY, request_id="x", run_id="y", tool="z", args_hash="h",
               expires_at=EXPIRES + 10)
    assert verify(d) == "wrong_request"
    assert verify(d, approver=dataclasses.replace(ALICE, revoked_at=NOW)) == "revoked"
    assert REASONS[0] == "unknown_approver" and REASONS[-1] == "decision_expiry_mismatch"


def test_an_answer_to_a_question_is_signed_with_empty_tool_and_hash() -> None:
    question = dataclasses.replace(CHECK, tool="", args_hash="")
    d = signed(tool="", args_hash="", decision="answer", answer="ship it on Monday")
    assert verify(d, check=question) is None
    assert d.answer == "ship it on Monday"


def test_signing_bad_input_names_the_problem() -> None:
    with pytest.raises(ConfigurationError, match="decision"):
        signed(decision="maybe")
    with pytest.raises(ConfigurationError, match="expires_at"):
        signed(expires_at=float("inf"))
    with pytest.raises(ConfigurationError, match="answer is not plain JSON"):
        signed(answer={"when": object()})


def test_a_decision_with_unknown_fields_is_not_a_decision() -> None:
    from pydantic import ValidationError

    data = signed().model_dump(mode="json")
    with pytest.raises(ValidationError):
        SignedDecision.model_validate({**data, "amount_override": 10})
