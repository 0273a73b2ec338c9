"""Payload codec: canonical bytes, content-addressed blobs for large values, and the one
place stored payloads are sealed (encrypted) and opened.

Large values inside an event or checkpoint are moved out into blobs keyed by their content
address and replaced by references, so a payload repeated across events is stored once:

* a large string or object becomes ``{"$blob": "<address>"}``;
* a large list becomes a *chain* ``{"$chain": "<address of last node>", "n": len}`` whose
  nodes are ``{"p": <previous node address or null>, "x": <element>}``. A list that grows by
  appending (a conversation) shares every earlier node with its previous version, so a
  journal of N turns stores O(N) bytes of history, not O(N²).

User dicts that happen to look like references are wrapped as ``{"$lit": ...}``.

**Sealing.** Every payload byte that leaves for the store passes through :meth:`Codec.seal`
and every one read back through :meth:`Codec.open`, each with a :class:`Where` saying what
the bytes are and where they live (tenant, run and seq of an event; tenant and address of a
blob; tenant, id and name of a signal...). With a :class:`Sealer` (``underway.crypto``:
AES-256-GCM under per-tenant data keys) that identity is the ciphertext's associated data,
so bytes copied anywhere else fail to open. Without one, bytes pass as they are — and a
sealed payload met without a sealer raises :class:`~underway.errors.KeyUnavailable`, which
readers show as ``[encrypted]``. The stored forms:

* an event keeps its envelope readable (type, version, seq, time, the checkpoint digest it
  commits to) and seals its ``data``: the canonical JSON of the envelope without ``data``,
  a NUL byte (which no JSON text holds), then the sealed box of the data;
* a blob is the sealed box, addressed by a keyed hash (:meth:`Sealer.address`) instead of
  SHA-256 so that equal contents of two tenants get unrelated addresses; a chain node keeps
  the address of the node before it in front of the box (``{"p":"<address>",``), the link
  the store follows to read a conversation in one query;
* a checkpoint, a signal's payload, a schedule's input, a knowledge record: the sealed box.

A sealed box starts with :data:`SEALED_VERSION` (no JSON text starts with that byte), so
what was stored in plaintext before encryption was turned on is still read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from . import _chunked as chunked
from ._where import UNSEALED as UNSEALED
from ._where import Where as Where
from ._where import blob_where as blob_where
from ._where import checkpoint_where as checkpoint_where
from ._where import event_where as event_where
from ._where import knowledge_where as knowledge_where
from ._where import run_error_where as run_error_where
from ._where import schedule_where as schedule_where
from ._where import signal_where as signal_where
from ._where import stream_where as stream_where
from .errors import IntegrityError, KeyUnavailable, UnderwayError, ValueTooLarge
from .events import JSON, canonical_json

__all__ = ["Codec", "Sealer", "Where", "blob_key", "is_sealed"]

DEFAULT_BLOB_THRESHOLD = 1024
"""Values whose canonical encoding exceeds this many bytes are stored as blobs."""

SEALED_VERSION = 1
"""The first byte of every sealed box (the format's version; no JSON text starts with it)."""

ENCRYPTED = "[encrypted]"
"""What readers show in place of a payload they cannot open."""

SEALED_TEXT = "sealed:v1:"
"""How a sealed text column's value begins (the base64 of the sealed box follows)."""

_REF_KEYS = frozenset({"$blob", "$chain", "$lit"})
_LINK = b'{"p":"'
_LINK_LEN = len(_LINK) + 64 + 2
"""A chain node's link in front of its box: ``{"p":"<64 hex>",``."""
_BOX = bytes([SEALED_VERSION])

BlobFetcher = Callable[[list[str]], Mapping[str, bytes]]
"""Fetches blob bytes by address; missing addresses are simply absent from the result."""


class Sealer(Protocol):
    """Encrypts and decrypts stored payloads (``underway.crypto.Envelope`` is one)."""

    def seal(self, raw: bytes, where: Where) -> bytes:
        """The sealed box of ``raw``, bound to ``where``; starts with :data:`SEALED_VERSION`."""
        ...

    def open(self, sealed: bytes, where: Where) -> bytes:
        """The plaintext of a box :meth:`seal` made for ``where``. Raises
        :class:`~underway.errors.KeyUnavailable` when its key cannot be had here and
        :class:`~underway.errors.IntegrityError` when it does not open (altered, or
        sealed for another place)."""
        ...

    def address(self, raw: bytes, where: Where) -> str:
        """The content address (64 hex digits) of a blob ``raw`` written for ``where``'s
        tenant: a keyed hash, so equal contents of two tenants get unrelated addresses."""
        ...

    def terms(self, tenant_id: str, words: Sequence[str], *, every_key: bool) -> list[str]:
        """Blind index terms for ``words`` (keyed hashes).

        Args:
            tenant_id: The tenant whose keys hash them.
            words: The words.
            every_key: For a search: hash under each key the tenant's records may have been
                indexed with. Else only under the key new records are sealed with.
        """
        ...

    def prepare(self, tenant_id: str, subject: str | None = None) -> None:
        """Read what sealing for the tenant (and data subject) needs now (its current
        key), so that sealing later reads nothing: called from synchronous store work,
        never on an event loop."""
        ...


def blob_key(data: bytes) -> str:
    """The content address of ``data`` when payloads are not sealed (SHA-256)."""
    return hashlib.sha256(data).hexdigest()


def is_sealed(stored: bytes) -> bool:
    """Whether ``stored`` is a sealed box (or a sealed chain node)."""
    if stored[:1] == _BOX:
        return True
    return stored[:6] == _LINK and stored[_LINK_LEN:_LINK_LEN + 1] == _BOX


def box_of(stored: bytes) -> bytes:
    """The sealed box inside stored blob bytes (a chain node keeps a link in front)."""
    return stored[_LINK_LEN:] if stored[:6] == _LINK else stored


def split_event(stored: bytes) -> tuple[JSON, bytes | None]:
    """A stored event's envelope as stored (parsed JSON; without ``data`` when that is
    sealed) and its sealed box (None: not sealed). Readable without keys."""
    cut = stored.find(b"\x00")
    if cut < 0:
        return json.loads(stored), None
    return json.loads(stored[:cut].decode()), stored[cut + 1:]


class Codec:
    """Encodes JSON payloads to stored bytes and back, externalizing large values.

    It seals and opens them when given a ``sealer`` (see the module's docstring). Thread-safe:
    a journal is read on a store's I/O threads while the event loop encodes. The cache of
    blobs read and written is shared under a lock.

    A string longer than ``chunk_bytes`` characters is a chunked blob, encoded, hashed,
    written and read a chunk at a time (:mod:`underway._chunked`).

    Args:
        threshold: The size in bytes above which a value is moved into a blob.
        sealer: Seals and opens payloads; None stores them as they are.
        cache_size: The most blobs kept in the cache.
        chunk_bytes: Strings longer than this are stored in chunks of about this size.
        max_value_bytes: The most bytes one stored value's canonical JSON may have; a
            larger one raises :class:`~underway.errors.ValueTooLarge`.
    """

    def __init__(
        self,
        *,
        threshold: int = DEFAULT_BLOB_THRESHOLD,
        sealer: Sealer | None = None,
        cache_size: int = 4096,
        chunk_bytes: int = chunked.DEFAULT_CHUNK_BYTES,
        max_value_bytes: int = chunked.DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        self.threshold = threshold
        self.sealer = sealer
        """Seals and opens payloads (None: they are stored as they are)."""
        self.chunk_bytes = chunk_bytes
        self.max_value_bytes = max_value_bytes
        self._large: dict[tuple[int, str, str | None], chunked.LargeBlob] = {}
        """Chunked blobs made lately, by the string's id, tenant and subject: a value in a
        call's result, the state's patch and the checkpoint is hashed once."""
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    # -- the choke points -----------------------------------------------------------------
    def seal(self, raw: bytes, where: Where) -> bytes:
        """Stored bytes of payload ``raw`` kept at ``where``: sealed when this codec has a
        sealer, else ``raw`` itself. Every payload written passes here."""
        return raw if self.sealer is None else self.sealer.seal(raw, where)

    def open(self, stored: bytes, where: Where) -> bytes:
        """The payload whose stored bytes at ``where`` are ``stored``. Every payload read
        passes here: a sealed one without a sealer raises
        :class:`~underway.errors.KeyUnavailable`; one stored before encryption was turned
        on is returned as it is."""
        if stored[:1] != _BOX:
            return stored
        if self.sealer is None:
            raise KeyUnavailable(
                f"{where.what()} is encrypted and no keys were given (configure "
                "[encryption] in underway.toml, or pass --keyring / set UNDERWAY_KEYRING)"
            )
        return self.sealer.open(stored, where)

    def prepare(self, tenant_id: str, subject: str | None = None) -> None:
        """Have what sealing for the tenant (and data subject) needs at hand (see
        :meth:`Sealer.prepare`); nothing without a sealer."""
        if self.sealer is not None:
            self.sealer.prepare(tenant_id, subject)

    def open_json(self, stored: bytes, where: Where) -> JSON:
        """:meth:`open`, parsed as JSON."""
        return json.loads(self.open(stored, where))

    def seal_text(self, text: str, where: Where) -> str:
        """A text column's stored value: ``text`` itself without a sealer, else
        :data:`SEALED_TEXT` and the base64 of its sealed box."""
        if self.sealer is None:
            return text
        return SEALED_TEXT + base64.b64encode(
            self.sealer.seal(text.encode("utf-8"), where)).decode("ascii")

    def open_text(self, stored: str, where: Where) -> str:
        """The text a column stored through :meth:`seal_text`: :data:`ENCRYPTED` when it
        is sealed and cannot be opened here (no key, a destroyed key, or not this
        place's)."""
        if not stored.startswith(SEALED_TEXT):
            return stored
        try:
            box = _unbase64(stored[len(SEALED_TEXT):], where)
            return self.open(box, where).decode("utf-8")
        except (UnderwayError, UnicodeDecodeError):
            return ENCRYPTED

    # -- encode -------------------------------------------------------------------------
    def encode(self, value: JSON, blobs: dict[str, bytes], where: Where) -> bytes:
        """Stored bytes of ``value`` kept at ``where``, large parts moved into ``blobs``.

        Args:
            value: The value.
            blobs: Receives the blobs made, by address.
            where: Where it is kept.
        """
        return self.seal(canonical_json(self.externalize(value, blobs, where)), where)

    def encode_event(self, env: dict[str, JSON], blobs: dict[str, bytes], where: Where) -> bytes:
        """Stored bytes of an event's envelope ``env``.

        They are the canonical envelope, its ``data`` sealed when there is a sealer.

        Args:
            env: The envelope; its ``data`` is externalized in place when large.
            blobs: Receives the blobs made, by address.
            where: Where it is kept.
        """
        if self.sealer is None:
            # A small event has no part over the threshold; '"$' would need escaping. While
            # a chunked value is about, nothing is encoded whole first.
            raw = b"" if self._large else canonical_json(env)
            if not raw or len(raw) > self.threshold or b'"$' in raw:
                del raw
                env["data"] = self.externalize(env["data"], blobs, where)
                raw = canonical_json(env)
            return raw
        data = b"" if self._large else canonical_json(env["data"])
        if not data or len(data) > self.threshold or b'"$' in data:
            del data
            data = canonical_json(self.externalize(env["data"], blobs, where))
        header = canonical_json({k: v for k, v in env.items() if k != "data"})
        return header + b"\x00" + self.sealer.seal(data, where)

    def externalize(self, value: JSON, blobs: dict[str, bytes], where: Where) -> JSON:
        """``value`` with large parts replaced by references to ``blobs``.

        Args:
            value: The value.
            blobs: Receives the blobs made, addressed and sealed for ``where``'s tenant.
            where: Where the value is kept.
        """
        return self._ext(value, blobs, where)[0]

    def _store(
        self, raw: bytes, blobs: dict[str, bytes], where: Where, *, node: bool = False
    ) -> str:
        if len(raw) > self.max_value_bytes:
            raise ValueTooLarge(f"a value of {where.what()}", len(raw), self.max_value_bytes)
        if self.sealer is None:
            key = blob_key(raw)
            blobs[key] = raw
        else:
            key = self.sealer.address(raw, where)
            box = self.sealer.seal(raw, blob_where(where.tenant_id, key, where.run_id,
                                                   where.subject))
            # A chain node keeps its link (an address) readable: the store follows it to
            # read a conversation in one query. It is a hint; the box holds the node.
            link = raw[:_LINK_LEN] if node and raw[:6] == _LINK else b""
            blobs[key] = link + box
        self._remember(key, raw)
        return key

    def _ext(
        self, value: JSON, blobs: dict[str, bytes], where: Where
    ) -> tuple[JSON, int, bytes | None]:
        """(externalized value, approximate encoded size, its canonical bytes when known).

        A dict whose whole encoding fits under the threshold is kept as it is after one
        encoder call: nothing inside it can be large, so there is nothing to walk. This
        keeps re-encoding a long conversation (every turn's model request carries all of
        it) at one C-speed encode per message instead of a Python walk of every field."""
        if isinstance(value, str):
            size = len(value) + 2
            if len(value) > self.chunk_bytes and size > self.threshold:
                blob = self.large_blob(value, where)
                blobs[blob.key] = blob
                return {"$blob": blob.key}, 80, None
            if size > self.threshold:
                return {"$blob": self._store(canonical_json(value), blobs, where)}, 80, None
            return value, size, None
        if isinstance(value, dict):
            try:
                raw = None if self._large else canonical_json(value)
            except (TypeError, ValueError):
                raw = None
            if raw is not None and len(raw) <= self.threshold and b'"$' not in raw:
                return value, len(raw), raw
            out: dict[str, JSON] = {}
            size = 2
            for k, v in value.items():
                out[k], s, _ = self._ext(v, blobs, where)
                size += s + len(k) + 4
            if _REF_KEYS.intersection(out) and len(out) <= 2:
                out, size = {"$lit": out}, size + 9
            if size > self.threshold:
                return {"$blob": self._store(canonical_json(out), blobs, where)}, 80, None
            return out, size, None
        if isinstance(value, list | tuple):
            items = [self._ext(v, blobs, where) for v in value]
            size = 2 + sum(s + 1 for _, s, _ in items)
            if size > self.threshold and len(items) > 1:
                prev: str | None = None
                for item, _, raw in items:
                    if raw is None:
                        raw = canonical_json(item)
                    # canonical_json({"p": prev, "x": item}), built from the item's bytes.
                    head = (b'{"p":null,"x":' if prev is None
                            else b'{"p":"' + prev.encode() + b'","x":')
                    prev = self._store(head + raw + b"}", blobs, where, node=True)
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

    def large_blob(self, value: str, where: Where, what: str | None = None,
                   ) -> chunked.LargeBlob:
        """The chunked blob of a long string, hashed a chunk at a time.

        It is hashed once: remembered while the string is held elsewhere. Its chunks are
        made only when written. Slow for a large value: call it off the event loop.

        Args:
            value: The string.
            where: Where it is kept (its tenant, run and data subject).
            what: The value, in words, for the error when it is too large.

        Raises:
            ValueTooLarge: Its canonical JSON is over :attr:`max_value_bytes`.
        """
        # Unsealed, the address is the SHA-256 of the content: the same for every tenant
        # (and an unsealed event's place names none).
        memo = ((id(value), "", None) if self.sealer is None
                else (id(value), where.tenant_id, where.subject))
        with self._cache_lock:
            self._forget_large()
            found = self._large.get(memo)
        if found is None:
            found = chunked.make(value, where, self.sealer, self.chunk_bytes,
                                 self.max_value_bytes, what)
            with self._cache_lock:
                self._large[memo] = found
        return found

    def _forget_large(self) -> None:
        """Drop the chunked blobs whose string nobody else holds (call under the lock)."""
        for memo, blob in list(self._large.items()):
            # Two references: the blob's own, and getrefcount's argument.
            if sys.getrefcount(blob.value) <= 2:
                del self._large[memo]

    def forget_large(self) -> None:
        """Drop the chunked blobs remembered whose string nobody else holds."""
        with self._cache_lock:
            self._forget_large()

    # -- decode -------------------------------------------------------------------------
    def decode(self, stored: bytes, fetch: BlobFetcher, where: Where) -> JSON:
        """The JSON value whose stored bytes at ``where`` are ``stored``.

        Args:
            stored: The stored bytes.
            fetch: Resolves the tenant's blobs.
            where: Where they are kept.
        """
        return self._internalize(self.open_json(stored, where), fetch, where.tenant_id)

    def decode_event(self, stored: bytes, fetch: BlobFetcher, where: Where) -> JSON:
        """An event's envelope from its stored bytes: data opened when sealed, blobs resolved.

        Args:
            stored: The stored bytes.
            fetch: Resolves the tenant's blobs.
            where: Where they are kept.
        """
        cut = stored.find(b"\x00")
        if cut < 0:
            return self._internalize(json.loads(stored), fetch, where.tenant_id)
        # The header is a canonical JSON object without "data" (never empty: it holds the
        # type, seq and time): the opened data is spliced in and parsed with it, once.
        header = stored[:cut]
        if header[-1:] != b"}" or header == b"{}":
            raise IntegrityError(f"{where.what()}: a sealed event's header is not an object")
        box = stored[cut + 1:]
        sealer = self.sealer
        data = sealer.open(box, where) if sealer is not None and box[:1] == _BOX \
            else self.open(box, where)
        return self._internalize(json.loads(header[:-1] + b',"data":' + data + b"}"), fetch,
                                 where.tenant_id)

    def event_data(self, stored: bytes, where: Where) -> JSON:
        """A stored event's ``data`` as written (blob references unresolved), opened when
        it is sealed."""
        env, box = split_event(stored)
        if box is not None:
            return self.open_json(box, where)
        return env.get("data") if isinstance(env, dict) else None

    def _internalize(self, value: JSON, fetch: BlobFetcher, tenant_id: str) -> JSON:
        if isinstance(value, dict):
            if "$blob" in value and len(value) == 1:
                raw = self._get(value["$blob"], fetch, tenant_id)
                if chunked.is_manifest(raw):
                    return self.read_large(value["$blob"], raw, fetch, tenant_id)
                return self._internalize(json.loads(raw), fetch, tenant_id)
            if "$chain" in value and len(value) == 2:
                return self._read_chain(value["$chain"], int(value["n"]), fetch, tenant_id)
            if "$lit" in value and len(value) == 1:
                return {k: self._internalize(v, fetch, tenant_id)
                        for k, v in value["$lit"].items()}
            return {k: self._internalize(v, fetch, tenant_id) for k, v in value.items()}
        if isinstance(value, list):
            return [self._internalize(v, fetch, tenant_id) for v in value]
        return value

    def _read_chain(
        self, head: str | None, n: int, fetch: BlobFetcher, tenant_id: str
    ) -> list[JSON]:
        items: list[JSON] = []
        node_key = head
        while node_key is not None:
            node = json.loads(self._get(node_key, fetch, tenant_id))
            items.append(node["x"])
            node_key = node["p"]
        if len(items) != n:
            raise IntegrityError(f"blob chain {head} has {len(items)} nodes, expected {n}")
        items.reverse()
        return [self._internalize(v, fetch, tenant_id) for v in items]

    def _get(self, key: str, fetch: BlobFetcher, tenant_id: str) -> bytes:
        with self._cache_lock:
            raw = self._cache.get(key)
            if raw is not None:
                self._cache.move_to_end(key)
                return raw
        found = fetch([key]).get(key)
        if found is None:
            raise IntegrityError(f"blob {key} is referenced but missing from the store")
        if chunked.is_manifest(found):
            return found  # read by read_large, never cached whole
        raw = self.open_blob(found, key, tenant_id)
        self._remember(key, raw)
        return raw

    def read_large(self, key: str, stored: bytes, fetch: BlobFetcher, tenant_id: str) -> JSON:
        """The value of a chunked blob, read a chunk at a time.

        Args:
            key: The blob's address.
            stored: Its manifest row.
            fetch: A :class:`~underway.journal.blobs.BlobReader`: reads the chunks and
                keeps the value for the other decodes it serves.
            tenant_id: The blob's tenant.
        """
        values = getattr(fetch, "values", None)
        if values is not None and key in values:
            return values[key]
        with self._cache_lock:
            self._forget_large()
            held = next((b.value for b in self._large.values() if b.key == key), None)
        if held is not None:
            return held  # written by this process and still in memory: not read again
        chunk = getattr(fetch, "chunk", None)
        if chunk is None:
            raise IntegrityError(f"blob {key} is stored in chunks, which this reader "
                                 "cannot read (read it through a journal)")

        def open_chunk(box: bytes, i: int, n: int) -> bytes:
            return self.open(box, Where("blob_chunk", tenant_id, (key, i, n)))

        value = chunked.read_str(key, stored, chunk(key), open_chunk)
        if values is not None:
            values[key] = value
        return value

    def open_blob(self, stored: bytes, key: str, tenant_id: str) -> bytes:
        """The content of a blob.

        Opened under its key when sealed, which proves it is that blob of that tenant. Else
        checked against its SHA-256 address.

        Args:
            stored: The blob as stored.
            key: Its address.
            tenant_id: Its tenant.
        """
        if is_sealed(stored):
            return self.open(box_of(stored), blob_where(tenant_id, key))
        if chunked.is_manifest(stored):
            raise IntegrityError(f"blob {key} is stored in chunks: read it with read_large")
        if blob_key(stored) != key:
            raise IntegrityError(f"blob {key} does not match its content hash")
        return stored

    def _remember(self, key: str, raw: bytes) -> None:
        if len(raw) > self.chunk_bytes:
            return  # a large object's blob is not kept: the cache would hold it for long
        with self._cache_lock:
            self._cache[key] = raw
            self._cache.move_to_end(key)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


def _unbase64(box: str, where: Where) -> bytes:
    try:
        return base64.b64decode(box, validate=True)
    except (binascii.Error, ValueError):
        raise IntegrityError(
            f"the sealed data of a {where.kind} of tenant {where.tenant_id!r} is not base64"
        ) from None
