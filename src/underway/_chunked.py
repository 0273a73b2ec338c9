"""Large values stored in chunks: written and read a chunk at a time, never whole.

A string longer than the codec's ``chunk_bytes`` is a blob like any other large value:
addressed by the hash of its canonical JSON, referred to as ``{"$blob": key}``, stored
once. But its bytes never exist in one piece. The blob's row holds a small *manifest*
(:data:`MANIFEST` then ``{"kind":"str","n":<chunks>,"size":<bytes>}``), and its content
is ``n`` chunk rows (``blob_chunks``). Chunk ``i`` is the canonical JSON of characters
``i * chars`` to ``(i + 1) * chars`` of the string, the quotes left out, except that the
first chunk starts with the opening quote and the last ends with the closing one. Joined,
the chunks are the value's canonical JSON, so the address is the one it would have whole.

Each chunk stands alone: an escape or a UTF-8 sequence never spans two. So a chunk is
encoded, hashed, sealed, written, read and decoded on its own. Sealed (encrypted), each
chunk is its own AES-GCM box, bound to the blob's tenant and address, its index and the
number of chunks (``Where("blob_chunk", tenant, (key, index, n))``): a chunk moved,
dropped or taken from another blob does not open.

The chunks are written before the event that refers to the blob, in transactions of
their own. The manifest row is written with the event, in its transaction. A crash
between them leaves chunks that nothing refers to, never a reference to a partial blob.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from .errors import IntegrityError, ValueTooLarge
from .events import canonical_json

MANIFEST = b"\x02"
"""The first byte of a chunked blob's row (no JSON text, sealed box or chain node starts
with it)."""

SEALED = b"\x01"
"""How a sealed chunk begins (:data:`underway.codec.SEALED_VERSION`; a chunk of JSON text
never does: JSON escapes control characters)."""

DEFAULT_CHUNK_BYTES = 1 << 20
"""Strings longer than this many characters are stored in chunks of about this many bytes."""

DEFAULT_MAX_VALUE_BYTES = 256 << 20
"""The most bytes the canonical JSON of one stored value may have (256 MiB)."""

_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_ESCAPED = bytes(range(32)) + b'"\\'
"""The bytes JSON escapes in a string (every other character, ``ensure_ascii=False``,
stands for itself)."""


SLICE = 1 << 14
"""Characters checked and hashed at a time. Between two slices the hash runs without the
interpreter's lock, so the event loop and the other runs' threads take it within a slice's
time (tens of microseconds) rather than within the interpreter's switch interval (5 ms)."""


PACE = 1.0
"""Seconds the work on a chunked value rests, between two chunks, for each second it
worked: the thread that hashes, writes or reads the value leaves the CPU and the
interpreter's lock to the other runs at least as long as it takes them. 0: no rest. A
thread running an event loop never rests (it would stop every run on that loop)."""

MAX_REST = 0.05
"""The longest rest between two chunks, in seconds."""


class Pacer:
    """Rests between the chunks of a value's work, by :data:`PACE` (see there)."""

    def __init__(self) -> None:
        self.began = time.perf_counter()
        try:
            asyncio.get_running_loop()
            self.rests = False
        except RuntimeError:
            self.rests = PACE > 0

    def rest(self) -> None:
        """Rest for the time worked since the last rest (times :data:`PACE`)."""
        if self.rests:
            time.sleep(min((time.perf_counter() - self.began) * PACE, MAX_REST))
        self.began = time.perf_counter()


def _plain(body: bytes) -> bool:
    """Whether ``body``, the UTF-8 of some text, is its own JSON (no quote, backslash or
    control character): a C scan, several times faster than the JSON encoder."""
    return len(body.translate(None, _ESCAPED)) == len(body)


def _bounds(value: str, chars: int) -> Iterator[tuple[int, int, int, int]]:
    """(index, count, first character, end) of each chunk of ``value``."""
    n = max(1, -(-len(value) // chars))
    for i in range(n):
        yield i, n, i * chars, min(len(value), (i + 1) * chars)


def pieces(value: str, chars: int,
           escaped: frozenset[int] | None = None) -> Iterator[bytes]:
    """The chunks of ``value``'s canonical JSON, :data:`chars` characters each (see the
    module's docstring).

    ``escaped``: the chunks that have characters JSON escapes, when known (from
    :func:`scan`); the others are then taken as their UTF-8 without a check.
    """
    for i, n, start, end in _bounds(value, chars):
        part = value[start:end]
        body = part.encode("utf-8")
        if (i in escaped) if escaped is not None else not _plain(body):
            body = _ENCODE(part)[1:-1].encode("utf-8")
        del part
        if i == 0:
            body = b'"' + body
        if i == n - 1:
            body += b'"'
        yield body


def scan(value: str, chars: int, limit: int, digest: Any,
         what: str) -> tuple[int, frozenset[int]]:
    """Feed ``value``'s canonical JSON to ``digest`` (a hashlib or hmac object),
    :data:`SLICE` characters at a time: its size in bytes, and the chunks (of ``chars``
    characters) that have characters JSON escapes.

    The same bytes in the same order as :func:`pieces` gives, so the same digest.

    Raises:
        ValueTooLarge: The size is over ``limit`` (counting stops there).
    """
    size = 0
    escaped: set[int] = set()
    pacer = Pacer()
    for i, n, start, end in _bounds(value, chars):
        if i:
            pacer.rest()
        if i == 0:
            digest.update(b'"')
            size += 1
        for at in range(start, end, SLICE):
            part = value[at:min(at + SLICE, end)]
            body = part.encode("utf-8")
            if not _plain(body):
                body = _ENCODE(part)[1:-1].encode("utf-8")
                escaped.add(i)
            size += len(body)
            if size > limit:
                raise ValueTooLarge(what, size, limit)
            digest.update(body)
        if i == n - 1:
            digest.update(b'"')
            size += 1
    if size > limit:
        raise ValueTooLarge(what, size, limit)
    return size, frozenset(escaped)


class LargeBlob(bytes):
    """A chunked blob on its way to the store: the bytes are its manifest row, and
    :meth:`chunks` makes its chunk rows from the string it holds, one at a time.

    It travels in a batch's ``blobs`` like any blob's bytes. The engine writes its chunks
    before the batch (:meth:`~underway.store.journal.JournalStore.write_blob_chunks`,
    then ``written`` is set); a store given one whose chunks are not written writes them
    first.
    """

    key: str
    value: str
    chars: int
    n: int
    size: int
    escaped: frozenset[int] | None
    """The chunks with characters JSON escapes (None: not known, each is checked)."""
    written: bool
    _seal: Callable[[bytes, int, int], bytes] | None

    def __new__(cls, key: str, value: str, chars: int, size: int,
                seal: Callable[[bytes, int, int], bytes] | None,
                escaped: frozenset[int] | None = None) -> LargeBlob:
        n = max(1, -(-len(value) // chars))
        self = super().__new__(cls, MANIFEST + canonical_json(
            {"kind": "str", "n": n, "size": size}))
        self.key, self.value, self.chars, self.n, self.size = key, value, chars, n, size
        self.escaped = escaped
        self.written = False
        self._seal = seal
        return self

    def chunks(self) -> Iterator[bytes]:
        """The stored bytes of each chunk, in order (sealed when the codec seals)."""
        pacer = Pacer()
        for i, raw in enumerate(pieces(self.value, self.chars, self.escaped)):
            if i:
                pacer.rest()  # the chunk before is written: rest as long as that took
            yield raw if self._seal is None else self._seal(raw, i, self.n)


def is_manifest(stored: bytes) -> bool:
    """Whether a blob row's bytes are a chunked blob's manifest."""
    return stored[:1] == MANIFEST


def manifest(stored: bytes, key: str) -> tuple[str, int, int]:
    """(kind, chunks, size) of a chunked blob's manifest row."""
    try:
        m = json.loads(stored[1:])
        return str(m["kind"]), int(m["n"]), int(m["size"])
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(f"blob {key}: its manifest cannot be read") from None


def read_str(
    key: str, stored: bytes, chunk: Callable[[int], bytes | None],
    open_chunk: Callable[[bytes, int, int], bytes],
) -> str:
    """The string a chunked blob holds, read and decoded a chunk at a time.

    Args:
        key: The blob's address.
        stored: Its manifest row.
        chunk: Reads chunk ``i``'s stored bytes (None: missing).
        open_chunk: Opens a sealed chunk (its bytes, index, count). Chunks not sealed
            are checked instead: their SHA-256 must be the address.
    """
    kind, n, size = manifest(stored, key)
    if kind != "str":
        raise IntegrityError(f"blob {key} holds a chunked {kind!r}, which this version "
                             "cannot read")
    digest = hashlib.sha256()
    # Grown in place (CPython resizes a string nothing else refers to, and a large one
    # without copying it): the value and one chunk in memory, not the value twice.
    text = ""
    total = 0
    sealed = False
    pacer = Pacer()
    for i in range(n):
        if i:
            pacer.rest()
        raw = chunk(i)
        if raw is None:
            raise IntegrityError(f"blob {key}: chunk {i} of {n} is missing from the store")
        # Every chunk is sealed, or none is: a plain chunk put among sealed ones would
        # escape both the seal's check and the address's.
        if i == 0:
            sealed = raw[:1] == SEALED
        elif (raw[:1] == SEALED) != sealed:
            raise IntegrityError(f"blob {key}: chunk {i} of {n} is "
                                 f"{'not ' if sealed else ''}sealed, unlike chunk 0")
        if sealed:
            raw = open_chunk(raw, i, n)
        else:
            digest.update(raw)
        total += len(raw)
        first, last = i == 0, i == n - 1
        if (first and raw[:1] != b'"') or (last and raw[-1:] != b'"'):
            raise IntegrityError(f"blob {key}: chunk {i} of {n} is not part of a string")
        body = raw[1 if first else 0:len(raw) - 1 if last else len(raw)]
        try:
            text += (json.loads(b'"' + body + b'"') if b"\\" in body
                     else body.decode("utf-8"))
        except ValueError:
            raise IntegrityError(f"blob {key}: chunk {i} of {n} is not JSON text") from None
        del raw, body
    if total != size:
        raise IntegrityError(f"blob {key} holds {total} bytes, its manifest says {size}")
    if not sealed and digest.hexdigest() != key:
        raise IntegrityError(f"blob {key} does not match its content hash")
    return text


def make(value: str, where: Any, sealer: Any, chars: int, limit: int,
         what: str | None = None) -> LargeBlob:
    """The chunked blob of ``value`` kept at ``where`` (a :class:`underway.codec.Where`),
    addressed by a hash fed a chunk at a time (the sealer's keyed one when there is a
    sealer; one that cannot hash a chunk at a time is given the value whole).

    Raises:
        ValueTooLarge: Its canonical JSON is over ``limit`` bytes.
    """
    hasher = getattr(sealer, "address_hasher", None)
    what = what or f"a value of {where.what()}"
    escaped: frozenset[int] | None = None
    if sealer is None or hasher is not None:
        digest = hashlib.sha256() if hasher is None else hasher(where)
        size, escaped = scan(value, chars, limit, digest, what)
        key = digest.hexdigest()
    else:
        raw = b"".join(pieces(value, chars))
        if len(raw) > limit:
            raise ValueTooLarge(what, len(raw), limit)
        size, key = len(raw), sealer.address(raw, where)
        del raw
    if sealer is None:
        return LargeBlob(key, value, chars, size, None, escaped)
    chunk_where = where._replace(kind="blob_chunk", ident=(key,))

    def seal(raw: bytes, i: int, n: int) -> bytes:
        # Bound to the blob's tenant and address, the chunk's index and the chunk count.
        return bytes(sealer.seal(raw, chunk_where._replace(ident=(key, i, n))))

    return LargeBlob(key, value, chars, size, seal, escaped)
