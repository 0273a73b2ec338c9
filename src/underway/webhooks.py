"""Signing and verifying intake webhooks: HMAC-SHA256 over a timestamp and the body.

A sender that shares a secret with the tenant (per source, set with
``underway webhooks set`` or ``PUT /v1/intake-secrets/{source}``) sends two headers with each
delivery::

    X-Underway-Timestamp: 1767225600            (epoch seconds, when it was signed)
    X-Underway-Signature: v1=<hex of HMAC-SHA256(secret, timestamp + "." + body)>

:func:`verify` refuses a delivery whose signature does not match the exact bytes of the body
and the timestamp, or whose timestamp is further than the replay window (five minutes by
default) from now, in either direction. A delivery that passes acts once per idempotency
key (:func:`underway.intake.intake`), so a sender may retry it freely within the window.
The secret is stored as given, not hashed: an HMAC cannot be checked without it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Literal

__all__ = [
    "REPLAY_WINDOW",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Refusal",
    "new_secret",
    "sign",
    "signature",
    "verify",
]

SIGNATURE_HEADER = "X-Underway-Signature"
"""The header carrying ``v1=<hex HMAC>``."""

TIMESTAMP_HEADER = "X-Underway-Timestamp"
"""The header carrying the signing time, in whole epoch seconds."""

REPLAY_WINDOW = 300.0
"""Seconds a signed delivery stays acceptable, either side of now."""

Refusal = Literal["missing_signature", "stale_timestamp", "bad_signature"]
"""Why a delivery is refused."""


def new_secret() -> str:
    """A fresh random webhook secret (256 bits)."""
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Underway-Signature`` value of ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body,
                   hashlib.sha256)
    return "v1=" + mac.hexdigest()


def sign(secret: str, body: bytes, *, at: float | None = None) -> dict[str, str]:
    """The two headers a sender adds to deliver ``body``, signed now (or ``at``)."""
    timestamp = str(int(time.time() if at is None else at))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str, body: bytes, *, timestamp: str | None, signed: str | None, now: float,
    window: float = REPLAY_WINDOW,
) -> Refusal | None:
    """Why the delivery of ``body`` with headers ``timestamp`` and ``signed`` must be
    refused, or None when it is genuine and fresh."""
    if not timestamp or not signed:
        return "missing_signature"
    try:
        at = int(timestamp)
    except ValueError:
        return "stale_timestamp"
    if abs(now - at) > window:
        return "stale_timestamp"
    expected = signature(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode("ascii"), signed.strip().encode("utf-8",
                                                                                "replace")):
        return "bad_signature"
    return None
