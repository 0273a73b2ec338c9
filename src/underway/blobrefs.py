"""The blobs a stored payload refers to, followed to the end: what an audit checks (every
blob an event reaches is there and unaltered) and what the blob collector keeps (every
blob a remaining event or checkpoint reaches).

A payload holds references (``{"$blob": key}``, ``{"$chain": key, "n": len}``, see
:mod:`underway.codec`); a blob may hold more of them, and a chain node links to the node
before it. :func:`broken_blob` walks them all.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .codec import blob_key
from .events import JSON
from .store.records import StoredEvent

Fetch = Callable[[list[str]], dict[str, bytes]]
"""Reads blobs by key; keys not stored are absent from the result."""
Opener = Callable[[bytes], bytes]
"""Opens a sealed (encrypted) blob."""


def payload_problem(s: StoredEvent, fetch: Fetch, seen: set[str]) -> str | None:
    """What is wrong with a (correctly chained, unencrypted) event's content, if anything."""
    try:
        env = json.loads(s.payload)
    except (ValueError, RecursionError):
        return "payload is not valid JSON"
    if not isinstance(env, dict):
        return "payload is not a JSON object"
    if _exact(env.get("seq")) != _exact(s.seq) or env.get("type") != s.type:
        return "stored seq/type differ from the hashed payload"
    broken = broken_blob(env, fetch, seen)
    if broken is not None:
        return f"refers to blob {broken}, which is missing or altered"
    return None


def _exact(value: object) -> tuple[type, object]:
    """``value`` with its type, so that ``true`` never passes for ``1``."""
    return type(value), value


def broken_blob(
    value: JSON, fetch: Fetch, seen: set[str], *, open: Opener | None = None
) -> str | None:
    """The first blob reachable from ``value`` that is missing, fails its content hash,
    cannot be opened (``open``: how sealed blobs are opened) or holds something the codec
    never writes; None when every blob reachable is sound. Every blob read and found sound
    is added to ``seen``, which also spares re-reading blobs (a conversation's chain nodes)
    that values walked before share.

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
        raw = fetch([key]).get(key)
        try:
            if raw is not None and open is not None:
                raw = open(raw)
        except Exception:
            return key
        if raw is None or blob_key(raw) != key:
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
