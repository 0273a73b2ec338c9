"""Signed decisions on approval requests, and the checks a decision must pass.

A decision is an Ed25519 signature by a registered approver over every field of
:class:`SignedDecision` but the signature itself: the request, run, tenant, tool, the hash
of the exact arguments, the verdict, an expiry, a nonce, the approver, a comment and (for a
question or a resolution) the answer. The signed bytes are a domain tag, then those
fields as RFC 8785 (JCS) canonical JSON, so a verifier in any language rebuilds them with
a stock JCS library. The tag means a signature made for anything else never passes as a
decision.

Decisions signed before JCS carry no ``canon`` field. They signed another tag and
underway's own canonical JSON, and they verify exactly as they always did. Each format
has its own tag, so relabelling a decision as the other format breaks its signature.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError

from ...errors import ConfigurationError
from ...events import JSON, canonical_json
from ...store.base import ApproverRecord
from .keys import decode_public_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["ApprovalCheck", "SignedDecision", "sign_decision", "verify_decision"]

DOMAIN = b"underway-approval-v2\n"
"""Prefix of the bytes a decision over JCS signs: binds a signature to this use and
format."""

LEGACY_DOMAIN = b"underway-approval-v1\n"
"""Prefix of the bytes a decision without ``canon`` signed (the format before JCS)."""

JCS = "jcs"
"""The ``canon`` of every decision signed now: its fields are written by RFC 8785."""

Decision = Literal["approve", "reject", "answer", "resolve"]
"""``resolve`` settles an escalation (an unknown outcome, a deadline, a budget): its
``answer`` is ``{"resolution": "succeeded" | "failed" | "retry", "result": ...}``."""

REASONS = (
    "unknown_approver", "revoked", "wrong_tenant", "wrong_request", "wrong_run", "wrong_tool",
    "args_mismatch", "missing_role", "bad_signature", "expired", "decision_expiry_mismatch",
)
"""Every reason :func:`verify_decision` can give, in the order it checks them."""

REASON_TEXT = {
    "unknown_approver": "this approver is not registered in the tenant",
    "revoked": "this approver has been revoked",
    "wrong_tenant": "the approver or decision belongs to another tenant",
    "wrong_request": "the decision names another request",
    "wrong_run": "the decision names another run",
    "wrong_tool": "the decision names another tool",
    "args_mismatch": "the decision is for other arguments",
    "missing_role": "the approver lacks the role the request requires",
    "bad_signature": "the signature does not verify with the registered public key",
    "expired": "the request or the decision has expired",
    "decision_expiry_mismatch": "the decision outlives the request",
}
"""Each of :data:`REASONS` in words, for messages to people."""


@dataclass(frozen=True, slots=True)
class ApprovalCheck:
    """What a decision must match: the journaled request it answers.

    For a question (an escalation asking a person for an answer) ``tool`` and
    ``args_hash`` are empty strings; for a resolution they are the escalated call's (empty
    when the escalation names no call).
    """

    request_id: str
    run_id: str
    tenant_id: str
    tool: str
    args_hash: str
    required_role: str | None
    expires_at: float


class SignedDecision(BaseModel):
    """An approver's signed verdict on one request, as sent to the run.

    ``signature`` is the base64 Ed25519 signature of :meth:`signed_bytes`. ``canon`` names
    how the fields are written: ``"jcs"`` (RFC 8785) for every decision signed now, None
    for one signed before JCS. The model is frozen and refuses unknown fields, so what is
    verified is exactly what was signed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    run_id: str
    tenant_id: str
    tool: str
    args_hash: str
    decision: Decision
    expires_at: FiniteFloat
    nonce: str
    approver_id: str
    comment: str = ""
    answer: JSON = None
    canon: Literal["jcs"] | None = Field(
        default=None, description='How the signed fields are written: "jcs" (RFC 8785); '
        "absent or null for a decision signed before JCS.")
    signature: str

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers.

        Over JCS: :data:`DOMAIN`, then the RFC 8785 JSON of every field except
        ``signature``. Before JCS (no ``canon``): :data:`LEGACY_DOMAIN`, then underway's
        canonical JSON of every field except ``signature`` and ``canon``.

        Raises:
            ValueError: A value JCS cannot write exactly (an integer past 2**53, a lone
                surrogate).
        """
        if self.canon == JCS:
            return DOMAIN + rfc8785.dumps(self.model_dump(mode="json", exclude={"signature"}))
        fields = self.model_dump(mode="json", exclude={"signature", "canon"})
        return LEGACY_DOMAIN + canonical_json(fields)


def sign_decision(
    private_key: Ed25519PrivateKey,
    *,
    request_id: str,
    run_id: str,
    tenant_id: str,
    tool: str,
    args_hash: str,
    decision: Decision,
    expires_at: float,
    approver_id: str,
    comment: str = "",
    answer: JSON = None,
    nonce: str | None = None,
) -> SignedDecision:
    """Sign a decision with ``private_key``, over RFC 8785 (JCS).

    Signing happens where the key is: only the returned decision travels to the run.
    JCS writes numbers as IEEE doubles, so an answer holding an integer past 2**53 is
    refused: send such a number as a string.

    Args:
        private_key: The approver's key.
        request_id: The request it answers.
        run_id: The request's run.
        tenant_id: The run's tenant.
        tool: The escalated call's tool; empty for a question.
        args_hash: The escalated call's arguments hash; empty for a question.
        decision: The verdict.
        expires_at: When the decision expires.
        approver_id: The approver.
        comment: Why, in the approver's words.
        answer: The answer, for a question.
        nonce: Defaults to 128 random bits in hex.
    """
    try:
        unsigned = SignedDecision(
            request_id=request_id, run_id=run_id, tenant_id=tenant_id, tool=tool,
            args_hash=args_hash, decision=decision, expires_at=expires_at,
            nonce=nonce if nonce is not None else secrets.token_hex(16),
            approver_id=approver_id, comment=comment, answer=answer, canon=JCS,
            signature="",
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigurationError(f"cannot sign this decision: {problems}") from None
    try:
        message = unsigned.signed_bytes()
    except rfc8785.IntegerDomainError as exc:
        raise ConfigurationError(
            f"cannot sign this decision: {exc}; JCS writes numbers as IEEE doubles, so "
            "send an integer past 2**53 as a string"
        ) from None
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot sign this decision: its answer is not plain JSON ({exc})"
        ) from None
    signature = base64.b64encode(private_key.sign(message)).decode("ascii")
    return unsigned.model_copy(update={"signature": signature})


def verify_decision(
    d: SignedDecision,
    *,
    check: ApprovalCheck,
    approver: ApproverRecord | None,
    now: float,
) -> str | None:
    """Why ``d`` is not a valid decision on ``check``; None when it is.

    A revoked approver's decisions fail even when signed before the revocation. The decision
    may expire earlier than the request, never later. Both formats verify: over JCS, and
    the one before it (see :meth:`SignedDecision.signed_bytes`).

    Args:
        d: The decision.
        check: The journaled request it must answer.
        approver: The registry's record for ``d.approver_id``, None when there is none. A
            record for another id counts as no record.
        now: The time now.

    Returns:
        None, or the first failed check's reason, one of :data:`REASONS`.
    """
    if approver is None or approver.approver_id != d.approver_id:
        return "unknown_approver"
    if approver.revoked_at is not None:
        return "revoked"
    if approver.tenant_id != check.tenant_id or d.tenant_id != check.tenant_id:
        return "wrong_tenant"
    if d.request_id != check.request_id:
        return "wrong_request"
    if d.run_id != check.run_id:
        return "wrong_run"
    if d.tool != check.tool:
        return "wrong_tool"
    if d.args_hash != check.args_hash:
        return "args_mismatch"
    if check.required_role is not None and check.required_role not in approver.roles:
        return "missing_role"
    if not _signature_holds(d, approver.public_key):
        return "bad_signature"
    if now >= min(check.expires_at, d.expires_at):
        return "expired"
    if d.expires_at > check.expires_at:
        return "decision_expiry_mismatch"
    return None


def _signature_holds(d: SignedDecision, public_key: str) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        key = decode_public_key(public_key)
        signature = base64.b64decode(d.signature, validate=True)
        key.verify(signature, d.signed_bytes())
    except (ConfigurationError, binascii.Error, ValueError, TypeError, InvalidSignature):
        return False
    return True
