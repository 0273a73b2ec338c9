"""Encryption at rest: every stored payload sealed with AES-256-GCM under its tenant's data
key, the data keys wrapped by a key-encryption key that never enters the database.

Turn it on for a store and every path through it seals and opens — events, checkpoints,
blobs, signals, intake, schedules' input, knowledge records, the run row's error::

    import underway as uw
    from underway.crypto import KeyringFile, encrypt

    store = uw.connect("sqlite:///agent.db")
    encrypt(store, KeyringFile("/secure/underway.keyring"))   # or EnvKey(), CallbackKeys(...)
    engine = uw.Engine(store, flows=[...])

What each piece holds: :mod:`.providers` (where KEKs live), :mod:`.datakeys` (tenants'
data keys and the key hierarchy), :mod:`.envelope` (the sealer and :func:`encrypt`),
:mod:`.rotation` (KEK and data-key rotation). The formats and their associated data are
described in :mod:`underway.codec`; docs/data-protection.md says what is and is not
encrypted, and what it costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .datakeys import DataKey, DataKeys
from .envelope import Envelope, NoKeys, encrypt, is_encrypted, refuse_plaintext
from .providers import CallbackKeys, EnvKey, KeyProvider, KeyringFile, kek_fingerprint, new_kek

# The rotation flow loads on first use: reading payloads needs no flow.
if TYPE_CHECKING:
    from .rotation import (
        ROTATION_FLOW,
        RotationInput,
        RotationState,
        reseal,
        rotation_flow,
    )
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        n: ".rotation" for n in ("ROTATION_FLOW", "RotationInput", "RotationState", "reseal",
                                 "rotation_flow")
    }, globals())

__all__ = [
    "ROTATION_FLOW",
    "CallbackKeys",
    "DataKey",
    "DataKeys",
    "EnvKey",
    "Envelope",
    "KeyProvider",
    "KeyringFile",
    "NoKeys",
    "RotationInput",
    "RotationState",
    "encrypt",
    "is_encrypted",
    "kek_fingerprint",
    "new_kek",
    "refuse_plaintext",
    "reseal",
    "rotation_flow",
]
