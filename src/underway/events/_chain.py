"""Canonical JSON and the hash chain: what is stored for an event, and how each stored
event chains from the one before it."""

from __future__ import annotations

import hashlib
import json

from ._base import JSON

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""The encoder ``json.dumps`` would build for these options on every call, built once:
a step encodes several payloads, and making the encoder was a third of each encoding's
cost. Its ``encode`` keeps no state between calls (each makes its own cycle check)."""


def canonical_json(value: JSON) -> bytes:
    """Encode ``value`` as canonical JSON: sorted keys, no spaces, UTF-8, no NaN."""
    return _CANONICAL.encode(value).encode("utf-8")


def genesis_hash(tenant_id: str, run_id: str) -> str:
    """The hash a run's chain starts from: bound to the tenant and the run."""
    return hashlib.sha256(f"underway:{tenant_id}\x00{run_id}".encode()).hexdigest()


def chain_hash(prev_hash: str, stored: bytes) -> str:
    """``sha256(prev_hash || stored bytes)`` as hex."""
    h = hashlib.sha256(bytes.fromhex(prev_hash))
    h.update(stored)
    return h.hexdigest()
