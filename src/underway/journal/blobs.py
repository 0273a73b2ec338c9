"""The blobs a stored payload refers to, followed to the end: what an audit checks (every
blob an event reaches is there and unaltered) and what the blob collector keeps (every
blob a remaining event or checkpoint reaches).

A payload holds references (``{"$blob": key}``, ``{"$chain": key, "n": len}``, see
:mod:`underway.codec`); a blob may hold more of them, and a chain node links to the node
before it. :func:`broken_blob` walks them all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from .._chunked import is_manifest
from ..codec import blob_key, split_event
from ..errors import KeyUnavailable, UnderwayError
from ..events import JSON, placed
from ..store.journal import CHAIN_LIMIT, JournalStore
from ..store.records import StoredEvent

__all__ = ["BlobReader", "blob_refs"]

Fetch = Callable[[list[str]], dict[str, bytes]]
"""Reads blobs by key; keys not stored are absent from the result."""
Content = Callable[[str, bytes], bytes]
"""A stored blob's content, given its address and stored bytes (opened when sealed, which
proves it is that blob); raises when it is not that blob's
(:meth:`underway.codec.Codec.open_blob`)."""


def blob_refs(value: JSON) -> list[str]:
    """The blob addresses ``value`` refers to directly (``$blob`` and the heads of
    ``$chain`` references, at any depth), without reading any blob."""
    found: list[str] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            if len(v) == 1 and isinstance(v.get("$blob"), str):
                found.append(v["$blob"])
            elif len(v) == 2 and isinstance(v.get("$chain"), str):
                found.append(v["$chain"])
            else:
                todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
    return found


def envelope_problem(s: StoredEvent) -> str | None:
    """What is wrong with a (correctly chained) event's envelope, if anything: it must be
    a JSON object that names the row's seq and type or (hashed with them) neither
    (readable whether or not its data is sealed)."""
    try:
        env = split_event(s.payload)[0]
    except (ValueError, RecursionError):
        return "payload is not valid JSON"
    if not isinstance(env, dict):
        return "payload is not a JSON object"
    try:
        placed(env, s.seq, s.type)
    except ValueError as exc:
        return str(exc)
    return None


def _plain(key: str, stored: bytes) -> bytes:
    if blob_key(stored) != key:
        raise ValueError(f"blob {key} does not match its content hash")
    return stored


def broken_blob(
    value: JSON, fetch: Fetch, seen: set[str], *, content: Content = _plain,
    sealed_ok: bool = True, chunked: Callable[[str, bytes], object] | None = None,
) -> str | None:
    """The first blob reachable from ``value`` that is missing, fails its content hash (or,
    sealed, does not open under its key as that blob: ``content`` opens it), or holds
    something the codec never writes; None when every blob reachable is sound. A sealed
    blob whose key is not here is taken as sound when ``sealed_ok`` (its seal vouches for
    it; what it refers to is not followed), else reported. Every blob read and found
    sound is added to ``seen``, which also spares re-reading blobs (a conversation's chain
    nodes) that values walked before share. A chunked blob is read whole by ``chunked``
    (given its address and manifest row), which raises when it is not sound; without
    ``chunked`` it is reported.

    The chain hash covers an event's bytes, and those hold only blob references; a large
    value edited in the blobs table is caught here.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
            continue
        if not isinstance(v, dict):
            continue
        if "$lit" in v and len(v) == 1:
            inner = v["$lit"]
            stack.extend(inner.values() if isinstance(inner, dict) else [inner])
            continue
        chain = "$chain" in v and len(v) == 2
        key = v.get("$chain") if chain else v.get("$blob") if len(v) == 1 else None
        if not isinstance(key, str):
            stack.extend(v.values())
            continue
        if key in seen:
            continue
        stored = fetch([key]).get(key)
        if stored is None:
            return key
        if is_manifest(stored):
            # A chunked blob holds a string, which refers to nothing: read to be checked.
            if chunked is None:
                return key
            try:
                chunked(key, stored)
            except KeyUnavailable:
                if not sealed_ok:
                    return key
            except (UnderwayError, ValueError):
                return key
            seen.add(key)
            continue
        try:
            raw = content(key, stored)
        except KeyUnavailable:
            if not sealed_ok:
                return key
            seen.add(key)
            continue
        except (UnderwayError, ValueError):
            return key
        try:
            node = json.loads(raw)
            if chain:
                stack.append(node["x"])
                if node["p"] is not None:
                    stack.append({"$chain": node["p"], "n": 0})
            else:
                stack.append(node)
        except (ValueError, TypeError, KeyError, RecursionError):
            return key
        seen.add(key)
    return None


class BlobReader:
    """Reads blobs for one decode in few queries rather than one a blob.

    The codec asks for one blob at a time, and a list stored as a chain of nodes (a
    conversation) reveals the next node's key only once a node is read. So a single key
    is read with the blobs it links to (:meth:`~underway.store.journal.JournalStore.
    get_blob_chain`), several keys in one batch, and what was read is kept for the rest of
    the decode (up to :data:`KEEP` blobs). A chain is followed :data:`SPAN` blobs at first
    and twice as far each time the next read is still new, so a conversation of n nodes
    read from scratch takes about log2(n / SPAN) queries, while a chain that grew by a few
    nodes since its last read (the next event's conversation) takes one short query.
    """

    KEEP = 50_000
    """The most blobs one reader keeps; past it, it starts again empty."""

    SPAN = 16
    """How many linked blobs a first chain read follows."""

    def __init__(self, store: JournalStore, tenant_id: str) -> None:
        self.store = store
        self.tenant_id = tenant_id
        self._read: dict[str, bytes] = {}
        self._span = self.SPAN
        self.values: dict[str, JSON] = {}
        """The values of chunked blobs read (:meth:`underway.codec.Codec.read_large`):
        every event of the decode that refers to one shares one copy."""

    def chunk(self, key: str) -> Callable[[int], bytes | None]:
        """Reads the chunks of chunked blob ``key``, one at a time, by index."""
        return lambda idx: self.store.read_blob_chunk(self.tenant_id, key, idx)

    def __call__(self, keys: list[str]) -> dict[str, bytes]:
        """Bytes of those of ``keys`` that are stored."""
        missing = [k for k in keys if k not in self._read]
        if len(self._read) + len(missing) > self.KEEP:
            self._read.clear()
            self.values.clear()
            missing = list(keys)
        if len(missing) == 1:
            got = self.store.get_blob_chain(self.tenant_id, missing[0], limit=self._span)
            # Reaching blobs already read: the chain joined known ground; else go further.
            known = any(k in self._read for k in got)
            self._span = self.SPAN if known else min(self._span * 2, CHAIN_LIMIT)
            self._read.update(got)
        elif missing:
            self._read.update(self.store.get_blobs(self.tenant_id, missing))
        return {k: self._read[k] for k in keys if k in self._read}

    def prefetch(self, keys: Sequence[str]) -> None:
        """Read ``keys`` now, in few queries, for the decodes that will ask for them."""
        missing = list(dict.fromkeys(k for k in keys if k not in self._read))
        if len(self._read) + len(missing) > self.KEEP:
            self._read.clear()
        if missing:
            self._read.update(self.store.get_blobs(self.tenant_id, missing))
