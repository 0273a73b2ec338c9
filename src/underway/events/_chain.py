"""Canonical JSON and the hash chain: what is stored for an event, and how each stored
event chains from the one before it.

An event's envelope is stored without its seq and type, which its row holds: its link
hashes them with its stored bytes, ``sha256(prev_hash || "<seq>,<len(type)>:<type>," ||
stored bytes)`` (:func:`event_hash`), so the chain commits to the row's seq and type as
it did when they were copied into the envelope. An event stored before carries both in its
envelope and links by ``sha256(prev_hash || stored bytes)`` (:func:`chain_hash`); which
rule an event was written under is read off its envelope (:func:`link_hash`). The two
never meet on the same bytes: the old rule's input after ``prev_hash`` starts with ``{``,
the new one's with a digit.
"""

from __future__ import annotations

import hashlib
import json

from ._base import JSON


def _unencodable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_CANONICAL = None if _MAKE_ENCODER is None else _MAKE_ENCODER(
    None, _unencodable, json.encoder.encode_basestring, None, ":", ",", True, False, False,
)
"""The C encoder ``json.dumps`` builds on every call for these options (sorted keys, no
spaces, no NaN, non-ASCII kept), built once and reused: it keeps no state between calls
because it makes no cycle check (a cycle recurses until Python's recursion limit, and is
then refused as :func:`canonical_json` says). Making the encoder on each call was half of
encoding a small event."""

_FALLBACK = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: JSON) -> bytes:
    """Encode ``value`` as canonical JSON: sorted keys, no spaces, UTF-8, no NaN.

    Raises:
        TypeError: ``value`` holds something that is not JSON.
        ValueError: It holds a NaN or an infinity, a cycle, or is nested too deep.
    """
    if _CANONICAL is None:  # no C accelerator (another Python implementation)
        return _FALLBACK.encode(value).encode("utf-8")
    try:
        return "".join(_CANONICAL(value, 0)).encode("utf-8")
    except RecursionError:
        raise ValueError("a cycle, or nesting too deep to encode") from None


def genesis_hash(tenant_id: str, run_id: str) -> str:
    """The hash a run's chain starts from: bound to the tenant and the run."""
    return hashlib.sha256(f"underway:{tenant_id}\x00{run_id}".encode()).hexdigest()


def chain_hash(prev_hash: str, stored: bytes) -> str:
    """``sha256(prev_hash || stored bytes)`` as hex: the link of an event whose envelope
    names its own seq and type (how every event was stored before :func:`event_hash`)."""
    h = hashlib.sha256(bytes.fromhex(prev_hash))
    h.update(stored)
    return h.hexdigest()


def event_hash(prev_hash: str, seq: int, event_type: str, stored: bytes) -> str:
    """``sha256(prev_hash || "<seq>,<len(type)>:<type>," || stored bytes)`` as hex.

    It is the link of an event whose envelope leaves its seq and type to its row.

    Args:
        prev_hash: The chain's hash before it.
        seq: The event's seq.
        event_type: The event's type.
        stored: Its stored bytes.
    """
    return hashlib.sha256(b"%b%d,%d:%b,%b" % (
        bytes.fromhex(prev_hash), int(seq), len(event_type), event_type.encode(), stored,
    )).hexdigest()


def names_itself(stored: bytes) -> bool:
    """Whether the envelope stored as ``stored`` names its own seq or type (it was written
    under :func:`chain_hash`'s rule). Bytes that are no JSON object count as naming
    themselves: they are judged by the old rule, and their envelope fails its checks."""
    cut = stored.find(b"\x00")
    try:
        env = json.loads(stored if cut < 0 else stored[:cut])
    except (ValueError, RecursionError):
        return True
    return not isinstance(env, dict) or "seq" in env or "type" in env


def link_hash(prev_hash: str, seq: int, event_type: str, stored: bytes) -> str:
    """The hash of an event, by the rule it was written under.

    Args:
        prev_hash: The hash the chain reached before it.
        seq: The event's seq.
        event_type: The type it is stored as.
        stored: Its stored bytes.
    """
    if names_itself(stored):
        return chain_hash(prev_hash, stored)
    return event_hash(prev_hash, seq, event_type, stored)


def placed(env: JSON, seq: int, event_type: str) -> dict[str, JSON]:
    """A stored envelope, with its row's seq and type in it.

    An envelope names both, as it was stored before, or neither.

    Args:
        env: The envelope read from the row.
        seq: The row's seq.
        event_type: The row's type.

    Raises:
        ValueError: It is no object, or names a seq or type that are not the row's.
    """
    if not isinstance(env, dict):
        raise ValueError("the stored envelope is not a JSON object")
    if "seq" not in env and "type" not in env:
        return {**env, "seq": seq, "type": event_type}
    if _exact(env.get("seq")) != _exact(seq) or env.get("type") != event_type:
        raise ValueError("stored seq/type differ from the hashed payload")
    return env


def _exact(value: object) -> tuple[type, object]:
    """``value`` with its type, so that ``true`` never passes for ``1``."""
    return type(value), value
