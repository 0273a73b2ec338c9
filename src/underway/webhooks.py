"""Signing and verifying intake webhooks: HMAC-SHA256 over a timestamp and the body.

A sender that shares a secret with the tenant (per source, set with
``underway webhooks set`` or ``PUT /v1/intake-secrets/{source}``) sends two headers with each
delivery::

    X-Underway-Timestamp: 1767225600            (epoch seconds, when it was signed)
    X-Underway-Signature: v1=<hex of HMAC-SHA256(secret, timestamp + "." + body)>

:func:`verify` refuses a delivery whose signature does not match the exact bytes of the body
and the timestamp, or whose timestamp is further than the replay window (five minutes by
default) from now, in either direction. A delivery that passes acts once per idempotency
key (:func:`underway.scheduling.intake.intake`), so a sender may retry it freely within the window.

The idempotency key must be signed too, or a copy of one delivery posted under several
keys would act several times. It is the body's ``idempotency_key`` (covered by ``v1``), or
an ``Idempotency-Key`` header covered by a ``v2`` signature::

    X-Underway-Signature: v2=<hex of HMAC-SHA256(secret, timestamp + "." + key + "." + body)>

An ``Idempotency-Key`` header under a ``v1`` signature is refused.
The secret is stored as given, not hashed: an HMAC cannot be checked without it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Literal

__all__ = [
    "IDEMPOTENCY_HEADER",
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

Refusal = Literal["missing_signature", "stale_timestamp", "bad_signature",
                  "unsigned_idempotency_key"]
"""Why a delivery is refused."""


def new_secret() -> str:
    """A fresh random webhook secret (256 bits)."""
    return "whsec_" + secrets.token_urlsafe(32)


IDEMPOTENCY_HEADER = "Idempotency-Key"
"""The header that may carry the idempotency key (only under a ``v2`` signature)."""


def signature(secret: str, timestamp: str, body: bytes, *,
              idempotency_key: str | None = None) -> str:
    """The ``X-Underway-Signature`` value of ``body`` signed at ``timestamp``.

    Args:
        secret: The shared secret.
        timestamp: The ``X-Underway-Timestamp`` value.
        body: The delivery's body.
        idempotency_key: The ``Idempotency-Key`` header, if any.

    Returns:
        A ``v1`` signature, or ``v2`` when it also covers an ``idempotency_key``.
    """
    signed = timestamp.encode("ascii") + b"."
    if idempotency_key is not None:
        signed += idempotency_key.encode("utf-8") + b"."
    mac = hmac.new(secret.encode("utf-8"), signed + body, hashlib.sha256)
    return ("v1=" if idempotency_key is None else "v2=") + mac.hexdigest()


def sign(secret: str, body: bytes, *, at: float | None = None,
         idempotency_key: str | None = None) -> dict[str, str]:
    """The headers a sender adds to deliver ``body``.

    Args:
        secret: The shared secret.
        body: The delivery's body.
        at: When it is signed (epoch seconds); None means now.
        idempotency_key: Adds its ``Idempotency-Key`` header too, under the signature.
    """
    timestamp = str(int(time.time() if at is None else at))
    headers = {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(
        secret, timestamp, body, idempotency_key=idempotency_key)}
    if idempotency_key is not None:
        headers[IDEMPOTENCY_HEADER] = idempotency_key
    return headers


def verify(
    secret: str, body: bytes, *, timestamp: str | None, signed: str | None, now: float,
    window: float = REPLAY_WINDOW, idempotency_key: str | None = None,
) -> Refusal | None:
    """Why the delivery of ``body`` must be refused.

    Args:
        secret: The shared secret.
        body: The delivery's body.
        timestamp: Its ``X-Underway-Timestamp`` header, if any.
        signed: Its ``X-Underway-Signature`` header, if any.
        now: The time now (epoch seconds).
        window: How old (or how far ahead) a timestamp may be, in seconds.
        idempotency_key: Its ``Idempotency-Key`` header, if any.

    Returns:
        The refusal, or None when the delivery is genuine and fresh and the key header, if
        any, is under the signature.
    """
    if not timestamp or not signed:
        return "missing_signature"
    try:
        at = int(timestamp)
    except ValueError:
        return "stale_timestamp"
    if abs(now - at) > window:
        return "stale_timestamp"
    given = signed.strip()
    if idempotency_key is not None and not given.startswith("v2="):
        return "unsigned_idempotency_key"
    expected = signature(secret, timestamp, body, idempotency_key=idempotency_key)
    if not hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace")):
        return "bad_signature"
    return None
