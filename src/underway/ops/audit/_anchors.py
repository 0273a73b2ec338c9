"""Anchor records: the heads of every run's journal, signed with a key the database does
not hold, one JSON line each in an append-only log kept elsewhere.

A record is one line of canonical JSON::

    {"at": "2025-01-31T09:00:00Z", "count": 2, "key_id": "3f1c...", "leaves": [
     ["acme", "r-1", 13, "<hash>"], ["acme", "r-2", 7, "<hash>"]], "n": 4,
     "prev": "<sha256 of line 3>", "root": "<merkle root>", "sig": "<base64>",
     "tenant": null, "v": 1}

``leaves`` are (tenant, run, seq, head) sorted by tenant and run; ``root`` is their
Merkle root (:mod:`underway.ops.audit._merkle`); ``n`` is the record's line number in the log
and ``prev`` the SHA-256 of the line before it, so a record removed from the middle of the
log is noticed; ``sig`` is an Ed25519 signature over every other field.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ConfigurationError, UnderwayError
from ...events import JSON, canonical_json
from ...guard.approvals.keys import decode_public_key
from ...store.base import Store
from ._merkle import Leaf, merkle_root

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

FORMAT = 1
"""The version of the record format (``v``)."""
_CONTEXT = b"underway anchor v1\n"
"""Prefixed to what is signed, so an anchor signature can serve as nothing else."""


class MalformedRecord(UnderwayError, ValueError):
    """A line of the anchor log is not an anchor record."""


@dataclass(frozen=True, slots=True)
class AnchorRecord:
    """One signed record of the anchor log."""

    n: int
    """Its line number in the log, from 1."""
    prev: str | None
    """SHA-256 (hex) of the line before it; None for the first."""
    at: str
    """When the heads were read (ISO 8601, UTC)."""
    tenant: str | None
    """The one tenant anchored, or None for every tenant."""
    root: str
    """Merkle root (hex) over ``leaves``."""
    leaves: tuple[Leaf, ...]
    """(tenant, run, seq, head) of every run anchored, sorted."""
    key_id: str
    """Which key signed it (:func:`key_id`)."""
    sig: str = ""
    """Base64 Ed25519 signature over every other field."""

    def body(self) -> dict[str, JSON]:
        """Every field but the signature: what is signed."""
        return {
            "v": FORMAT, "n": self.n, "prev": self.prev, "at": self.at,
            "tenant": self.tenant, "count": len(self.leaves), "root": self.root,
            "leaves": [list(leaf) for leaf in self.leaves], "key_id": self.key_id,
        }

    def line(self) -> str:
        """The record as one line of the log (without the newline)."""
        return canonical_json({**self.body(), "sig": self.sig}).decode("utf-8")

    @classmethod
    def parse(cls, line: str) -> AnchorRecord:
        """The record in ``line``; :class:`MalformedRecord` says what is wrong with it."""
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            raise MalformedRecord("not JSON") from None
        if not isinstance(data, dict):
            raise MalformedRecord("not a JSON object")
        if data.get("v") != FORMAT:
            raise MalformedRecord(f"unknown format version {data.get('v')!r}")
        try:
            record = cls(
                n=_field(data, "n", int), prev=_field(data, "prev", str, optional=True),
                at=_field(data, "at", str), tenant=_field(data, "tenant", str, optional=True),
                root=_field(data, "root", str),
                leaves=tuple(_leaf(x) for x in _field(data, "leaves", list)),
                key_id=_field(data, "key_id", str), sig=_field(data, "sig", str),
            )
        except (TypeError, ValueError) as exc:
            raise MalformedRecord(str(exc)) from None
        if data.get("count") != len(record.leaves):
            raise MalformedRecord(
                f"count {data.get('count')!r} but {len(record.leaves)} leaves"
            )
        return record


def _field(data: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if type(value) is not kind:
        raise MalformedRecord(f"field {name!r} is not a {kind.__name__}")
    return value


def _leaf(value: object) -> Leaf:
    if (
        isinstance(value, list) and len(value) == 4
        and isinstance(value[0], str) and isinstance(value[1], str)
        and type(value[2]) is int and isinstance(value[3], str)
    ):
        return (value[0], value[1], value[2], value[3])
    raise MalformedRecord(f"leaf {value!r} is not [tenant, run, seq, head]")


def line_digest(line: str) -> str:
    """SHA-256 (hex) of a log line as stored, which the next record names as ``prev``."""
    return hashlib.sha256(line.encode("utf-8", "surrogateescape")).hexdigest()


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short, stable name of a public key: the first 16 hex digits of the SHA-256 of its
    raw 32 bytes."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign(record: AnchorRecord, key: Ed25519PrivateKey) -> AnchorRecord:
    """``record`` signed with ``key`` (its ``key_id`` set to the key's)."""
    unsigned = AnchorRecord(
        n=record.n, prev=record.prev, at=record.at, tenant=record.tenant, root=record.root,
        leaves=record.leaves, key_id=key_id(key.public_key()),
    )
    signature = key.sign(_CONTEXT + canonical_json(unsigned.body()))
    return AnchorRecord(
        n=unsigned.n, prev=unsigned.prev, at=unsigned.at, tenant=unsigned.tenant,
        root=unsigned.root, leaves=unsigned.leaves, key_id=unsigned.key_id,
        sig=base64.b64encode(signature).decode("ascii"),
    )


def signature_ok(record: AnchorRecord, public_key: Ed25519PublicKey) -> bool:
    """Whether ``record`` carries a valid signature by ``public_key`` over its fields."""
    from cryptography.exceptions import InvalidSignature

    try:
        signature = base64.b64decode(record.sig, validate=True)
        public_key.verify(signature, _CONTEXT + canonical_json(record.body()))
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def load_public_key(text: str) -> Ed25519PublicKey:
    """The Ed25519 public key in ``text`` (base64 of the raw 32 bytes) or in the file
    named by ``text`` (holding that line, as ``underway audit keygen`` prints it)."""
    path = Path(text)
    if path.is_file():
        try:
            text = path.read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read public key file {str(path)!r}: {exc}") from None
    return decode_public_key(text)


class AnchorSink(Protocol):
    """Where anchor records go: somewhere an insider of the database cannot rewrite (a file
    on another machine, a write-once object store bucket, an outside service)."""

    def append(self, build: Callable[[int, str | None], AnchorRecord]) -> AnchorRecord:
        """Append the record ``build(n, prev)`` makes, where ``n`` is the number of the new
        line and ``prev`` the :func:`line_digest` of the last line stored (None when
        empty), and return it. Appenders that share a log must take turns here."""
        ...


def anchor(
    store: Store,
    key: Ed25519PrivateKey,
    sink: AnchorSink,
    *,
    tenant_id: str | None = None,
    now: float | None = None,
) -> AnchorRecord:
    """Read the head of every run's journal, sign them and append the record to ``sink``.

    Args:
        store: The store.
        key: The signing key.
        sink: Where the record is appended.
        tenant_id: Only this tenant's runs; None means every tenant's.
        now: The record's time; None means now.

    Returns:
        The record appended.
    """
    return sign_heads(store.journal_heads(tenant_id), key, sink, tenant_id=tenant_id, now=now)


def sign_heads(
    heads: Sequence[Leaf],
    key: Ed25519PrivateKey,
    sink: AnchorSink,
    *,
    tenant_id: str | None = None,
    now: float | None = None,
) -> AnchorRecord:
    """Sign ``heads`` (tenant, run, seq, hash) and append the record to ``sink``."""
    leaves = tuple(sorted(heads))
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))

    def build(n: int, prev: str | None) -> AnchorRecord:
        return sign(AnchorRecord(
            n=n, prev=prev, at=at, tenant=tenant_id, root=merkle_root(leaves),
            leaves=leaves, key_id="",
        ), key)

    return sink.append(build)


def sorted_unique(leaves: Sequence[Leaf]) -> bool:
    """Whether ``leaves`` are in (tenant, run) order with no run twice, as signed."""
    keys = [(t, r) for t, r, _, _ in leaves]
    return all(a < b for a, b in itertools.pairwise(keys))


@dataclass(frozen=True, slots=True)
class Anchoring:
    """Anchoring on a schedule (``Worker(anchoring=...)``): every ``every`` seconds, sign
    the heads of the runs of ``tenant_id`` (every tenant when None) that moved since the
    last record with ``key`` and append them to ``sink``."""

    key: Ed25519PrivateKey
    sink: AnchorSink
    every: float
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        if not self.every > 0:
            raise ConfigurationError(f"anchoring interval must be positive, not {self.every}")

    def run(
        self, store: Store, anchored: dict[tuple[str, str], tuple[int, str]]
    ) -> AnchorRecord | None:
        """Anchor the heads of ``store`` that moved since they were last anchored;
        ``anchored`` (run -> (seq, head) signed, empty at first) is kept up to date. None
        when no head moved: every one is already in a record of the log."""
        heads = store.journal_heads(self.tenant_id)
        moved = [h for h in heads if anchored.get((h[0], h[1])) != (h[2], h[3])]
        if not moved:
            return None
        record = sign_heads(moved, self.key, self.sink, tenant_id=self.tenant_id)
        anchored.update({(t, r): (seq, head) for t, r, seq, head in moved})
        return record
