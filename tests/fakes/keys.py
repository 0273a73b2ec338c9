"""Key providers for tests: a KEK held in memory (fixed per provider), and turning a store's
encryption on with one."""

from __future__ import annotations

import os

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from underway.crypto import CallbackKeys, Envelope, encrypt
from underway.errors import KeyUnavailable
from underway.store import Store


def memory_keys(kek: bytes | None = None, kek_id: str = "test-kek") -> CallbackKeys:
    """A provider whose KEK lives in this process (a stand-in for a KMS)."""
    key = kek or os.urandom(32)

    def wrap(dek: bytes, context: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + AESGCM(key).encrypt(nonce, dek, context)

    def unwrap(wrapped: bytes, kek: str, context: bytes) -> bytes:
        if kek != kek_id:
            raise KeyUnavailable(f"no KEK {kek}")
        return AESGCM(key).decrypt(wrapped[:12], wrapped[12:], context)

    return CallbackKeys(kek_id=kek_id, wrap=wrap, unwrap=unwrap)


def encrypted(store: Store, kek: bytes | None = None) -> Envelope:
    """Turn encryption on for ``store`` with a KEK held in memory."""
    return encrypt(store, memory_keys(kek))
