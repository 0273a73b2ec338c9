"""The tombstone a retention purge stores in place of an event's payload.

An event's chain hash is made from the hash before it and its stored bytes (with its seq
and type: :mod:`underway.events._chain`); once the bytes are gone nobody can recompute it.
So the tombstone keeps the event's place in the chain: the hash
before it (``prev``) and its own (``hash``, unchanged in the row), the SHA-256 of the bytes
it replaced (``digest``: a copy of the payload kept elsewhere, say for a court, is proven
to be the original by it and the chain), the skeleton (type, seq, time and the fields of
:data:`~underway.events._purged.SKELETON`), and a ``seal``, the SHA-256 of all of that.

A verifier checks a tombstone in place of the chain link: it names the row's seq and type,
it follows the hash the chain reached (``prev``), it carries the row's hash, and its seal
matches its content. Editing a tombstone's kept fields, time, digest or hashes without
recomputing the seal fails verification, as editing an event without re-hashing the chain
does; the event after a tombstone still chains from its hash, and anchored heads still
prove the hashes. What a purge cannot keep is the proof of the purged content itself, and
the seal has no secret: a tombstone rewritten with its seal recomputed passes this check
(the journal's verification also requires what a purge leaves: a finished run, purged
whole, with the record of its purge).

Stored bytes are :data:`MARK` followed by the canonical JSON of the tombstone: a NUL
byte never starts a canonical JSON envelope, and an encrypted payload beginning with
these 24 bytes by chance is not to be expected.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ._base import JSON
from ._chain import canonical_json

MARK = b"\x00underway:tombstone:v1\n"
"""How stored tombstone bytes begin."""

_HEX = frozenset("0123456789abcdef")


def is_tombstone(payload: bytes) -> bool:
    """True when ``payload`` (an event's stored bytes) is a tombstone."""
    return payload.startswith(MARK)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a purged event keeps (see the module's docstring)."""

    seq: int
    type: str
    at: float | None
    """The event's time (None when its payload could not be read)."""
    kept: dict[str, JSON]
    digest: str
    prev: str
    hash: str
    seal: str = field(default="")

    @classmethod
    def of(
        cls, *, seq: int, type: str, at: float | None, kept: dict[str, JSON], payload: bytes,
        prev: str, hash: str,
    ) -> Tombstone:
        """The sealed tombstone of the event at ``seq``.

        Args:
            seq: The event's seq.
            type: The event's type.
            at: When it happened, if kept.
            kept: What of its data is kept.
            payload: Its stored bytes.
            prev: The chain's hash before it.
            hash: Its own hash.
        """
        when = None if at is None else float(at)
        t = cls(seq, type, when, dict(kept), hashlib.sha256(payload).hexdigest(), prev, hash)
        return cls(seq, type, when, t.kept, t.digest, prev, hash, _seal(t._body()))

    def _body(self) -> dict[str, JSON]:
        return {"seq": self.seq, "type": self.type, "at": self.at, "kept": self.kept,
                "digest": self.digest, "prev": self.prev, "hash": self.hash}

    def encode(self) -> bytes:
        """The bytes stored in place of the payload."""
        return MARK + canonical_json({**self._body(), "seal": self.seal})

    def problem(self, *, seq: int, type: str, prev: str, hash: str) -> str | None:
        """What is wrong with this tombstone standing in a row; None when nothing.

        Args:
            seq: The row's seq.
            type: The row's type.
            prev: The hash the chain reached before it.
            hash: The row's hash.
        """
        if _exact(self.seq) != _exact(seq) or self.type != type:
            return "stored seq/type differ from the tombstone's"
        if self.prev != prev:
            return "the tombstone does not follow the chain before it"
        if self.hash != hash:
            return "the tombstone's hash differs from the row's"
        if self.seal != _seal(self._body()):
            return "the tombstone does not match its seal: it was edited after the purge"
        return None


def read_tombstone(payload: bytes) -> Tombstone:
    """The tombstone stored as ``payload`` (which :func:`is_tombstone`); ValueError when
    its bytes are not one."""
    try:
        data: Any = json.loads(payload[len(MARK):])
    except (ValueError, RecursionError):
        raise ValueError("the tombstone is not valid JSON") from None
    if not isinstance(data, dict) or set(data) != {
        "seq", "type", "at", "kept", "digest", "prev", "hash", "seal"
    }:
        raise ValueError("the tombstone does not have a tombstone's fields")
    at = data["at"]
    if not (
        type(data["seq"]) is int and isinstance(data["type"], str)
        and (at is None or (isinstance(at, int | float) and not isinstance(at, bool)))
        and isinstance(data["kept"], dict)
        and all(_is_hash(data[k]) for k in ("digest", "prev", "hash", "seal"))
    ):
        raise ValueError("a field of the tombstone has the wrong type")
    return Tombstone(data["seq"], data["type"], None if at is None else float(at),
                     data["kept"], data["digest"], data["prev"], data["hash"], data["seal"])


def _seal(body: dict[str, JSON]) -> str:
    return hashlib.sha256(b"underway:tombstone\x00" + canonical_json(body)).hexdigest()


def _is_hash(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


def _exact(value: object) -> tuple[type, object]:
    return type(value), value
