"""Payload codec: canonical bytes, content-addressed blobs for large values, encryption seam.

Large values inside an event or checkpoint are moved out into blobs keyed by SHA-256 and
replaced by references, so a payload repeated across events is stored once:

* a large string or object becomes ``{"$blob": "<sha256>"}``;
* a large list becomes a *chain* ``{"$chain": "<sha256 of last node>", "n": len}`` whose
  nodes are ``{"p": <previous node hash or null>, "x": <element>}``. A list that grows by
  appending (a conversation) shares every earlier node with its previous version, so a
  journal of N turns stores O(N) bytes of history, not O(N²).

User dicts that happen to look like references are wrapped as ``{"$lit": ...}``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Protocol

from .errors import IntegrityError
from .events import JSON, canonical_json

DEFAULT_BLOB_THRESHOLD = 1024
"""Values whose canonical encoding exceeds this many bytes are stored as blobs."""

_REF_KEYS = frozenset({"$blob", "$chain", "$lit"})

BlobFetcher = Callable[[list[str]], Mapping[str, bytes]]
"""Fetches blob bytes by hash; missing hashes are simply absent from the result."""


class Cipher(Protocol):
    """Encrypts stored payload bytes (the hash chain covers the sealed bytes)."""

    def seal(self, plaintext: bytes) -> bytes:
        """Encrypt."""
        ...

    def open(self, sealed: bytes) -> bytes:
        """Decrypt."""
        ...


def blob_key(data: bytes) -> str:
    """The content address of ``data``."""
    return hashlib.sha256(data).hexdigest()


class Codec:
    """Encodes JSON payloads to stored bytes and back, externalizing large values.

    Thread-safe: a journal is read on a store's I/O threads while the event loop encodes
    (the cache of blobs read and written is shared under a lock)."""

    def __init__(
        self,
        *,
        threshold: int = DEFAULT_BLOB_THRESHOLD,
        cipher: Cipher | None = None,
        cache_size: int = 4096,
    ) -> None:
        self.threshold = threshold
        self.cipher = cipher
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    # -- encode -------------------------------------------------------------------------
    def encode(self, value: JSON, blobs: dict[str, bytes]) -> bytes:
        """Stored bytes of ``value`` with large parts moved into ``blobs``."""
        return self.seal(canonical_json(self.externalize(value, blobs)))

    def externalize(self, value: JSON, blobs: dict[str, bytes]) -> JSON:
        """``value`` with large parts replaced by references to ``blobs``."""
        return self._externalize(value, blobs)[0]

    def seal(self, raw: bytes) -> bytes:
        """Encrypt ``raw`` when a cipher is configured."""
        return self.cipher.seal(raw) if self.cipher else raw

    def _store(self, raw: bytes, blobs: dict[str, bytes]) -> str:
        key = blob_key(raw)
        blobs[key] = self.cipher.seal(raw) if self.cipher else raw
        self._remember(key, raw)
        return key

    def _externalize(self, value: JSON, blobs: dict[str, bytes]) -> tuple[JSON, int]:
        out, size, _ = self._ext(value, blobs)
        return out, size

    def _ext(self, value: JSON, blobs: dict[str, bytes]) -> tuple[JSON, int, bytes | None]:
        """(externalized value, approximate encoded size, its canonical bytes when known).

        A dict whose whole encoding fits under the threshold is kept as it is after one
        encoder call: nothing inside it can be large, so there is nothing to walk. This
        keeps re-encoding a long conversation (every turn's model request carries all of
        it) at one C-speed encode per message instead of a Python walk of every field."""
        if isinstance(value, str):
            size = len(value) + 2
            if size > self.threshold:
                return {"$blob": self._store(canonical_json(value), blobs)}, 80, None
            return value, size, None
        if isinstance(value, dict):
            try:
                raw = canonical_json(value)
            except (TypeError, ValueError):
                raw = None
            if raw is not None and len(raw) <= self.threshold and b'"$' not in raw:
                return value, len(raw), raw
            out: dict[str, JSON] = {}
            size = 2
            for k, v in value.items():
                out[k], s, _ = self._ext(v, blobs)
                size += s + len(k) + 4
            if _REF_KEYS.intersection(out) and len(out) <= 2:
                out, size = {"$lit": out}, size + 9
            if size > self.threshold:
                return {"$blob": self._store(canonical_json(out), blobs)}, 80, None
            return out, size, None
        if isinstance(value, list | tuple):
            items = [self._ext(v, blobs) for v in value]
            size = 2 + sum(s + 1 for _, s, _ in items)
            if size > self.threshold and len(items) > 1:
                prev: str | None = None
                for item, _, raw in items:
                    if raw is None:
                        raw = canonical_json(item)
                    # canonical_json({"p": prev, "x": item}), built from the item's bytes.
                    head = (b'{"p":null,"x":' if prev is None
                            else b'{"p":"' + prev.encode() + b'","x":')
                    prev = self._store(head + raw + b"}", blobs)
                return {"$chain": prev, "n": len(items)}, 90, None
            return [i for i, _, _ in items], size, None
        # Sizes of the common scalars without encoding them (the same lengths json gives).
        if value is None or value is True:
            return value, 4, None
        if value is False:
            return value, 5, None
        if type(value) is int:
            return value, len(repr(value)), None
        return value, len(json.dumps(value)), None

    # -- decode -------------------------------------------------------------------------
    def decode(self, stored: bytes, fetch: BlobFetcher) -> JSON:
        """The JSON value whose stored bytes are ``stored``, blobs resolved through ``fetch``."""
        raw = self.cipher.open(stored) if self.cipher else stored
        return self._internalize(json.loads(raw), fetch)

    def _internalize(self, value: JSON, fetch: BlobFetcher) -> JSON:
        if isinstance(value, dict):
            if "$blob" in value and len(value) == 1:
                return self._internalize(json.loads(self._get(value["$blob"], fetch)), fetch)
            if "$chain" in value and len(value) == 2:
                return self._read_chain(value["$chain"], int(value["n"]), fetch)
            if "$lit" in value and len(value) == 1:
                return {k: self._internalize(v, fetch) for k, v in value["$lit"].items()}
            return {k: self._internalize(v, fetch) for k, v in value.items()}
        if isinstance(value, list):
            return [self._internalize(v, fetch) for v in value]
        return value

    def _read_chain(self, head: str | None, n: int, fetch: BlobFetcher) -> list[JSON]:
        items: list[JSON] = []
        node_key = head
        while node_key is not None:
            node = json.loads(self._get(node_key, fetch))
            items.append(node["x"])
            node_key = node["p"]
        if len(items) != n:
            raise IntegrityError(f"blob chain {head} has {len(items)} nodes, expected {n}")
        items.reverse()
        return [self._internalize(v, fetch) for v in items]

    def _get(self, key: str, fetch: BlobFetcher) -> bytes:
        with self._cache_lock:
            raw = self._cache.get(key)
            if raw is not None:
                self._cache.move_to_end(key)
                return raw
        found = fetch([key]).get(key)
        if found is None:
            raise IntegrityError(f"blob {key} is referenced but missing from the store")
        raw = self.cipher.open(found) if self.cipher else found
        if blob_key(raw) != key:
            raise IntegrityError(f"blob {key} does not match its content hash")
        self._remember(key, raw)
        return raw

    def _remember(self, key: str, raw: bytes) -> None:
        with self._cache_lock:
            self._cache[key] = raw
            self._cache.move_to_end(key)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
