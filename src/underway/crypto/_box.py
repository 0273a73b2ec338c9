"""The sealed box: AES-256-GCM with a header that names its format version and data key.

    box = version (1 byte) | key id length (1 byte) | key id (ASCII) | nonce (12) | ciphertext+tag

The header is authenticated with the payload's identity (its associated data), so neither
the key id nor the place a box belongs to can be changed without the box failing to open.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..codec import SEALED_VERSION
from ..errors import IntegrityError

NONCE = 12
"""Bytes of a box's random nonce (96 bits, as GCM wants)."""


def seal_box(aead: AESGCM, key_id: str, raw: bytes, aad: bytes) -> bytes:
    """``raw`` sealed under ``aead`` (the data key ``key_id``), bound to ``aad``."""
    kid = key_id.encode("ascii")
    header = bytes((SEALED_VERSION, len(kid))) + kid
    nonce = os.urandom(NONCE)
    return header + nonce + aead.encrypt(nonce, raw, header + aad)


def box_key_id(box: bytes) -> str:
    """The id of the data key that sealed ``box``."""
    if len(box) < 2 or box[0] != SEALED_VERSION or len(box) < 2 + box[1] + NONCE + 16:
        raise IntegrityError(
            f"not a sealed box of format version {SEALED_VERSION} (it is cut short, or of "
            "a format this underway does not know)"
        )
    try:
        return box[2:2 + box[1]].decode("ascii")
    except UnicodeDecodeError:
        raise IntegrityError("a sealed box's key id is not ASCII") from None


def open_box(aead: AESGCM, box: bytes, aad: bytes) -> bytes:
    """The plaintext of ``box`` (sealed by :func:`seal_box` under ``aead`` for ``aad``);
    :class:`cryptography.exceptions.InvalidTag` when it does not open."""
    end = 2 + box[1]
    return aead.decrypt(box[end:end + NONCE], box[end + NONCE:], box[:end] + aad)


__all__ = ["NONCE", "InvalidTag", "box_key_id", "open_box", "seal_box"]
