"""Minimal RFC 6902 JSON Patch: diff two JSON documents and apply a patch.

The diff favours small patches for the shapes agents produce: changed keys of objects and
lists that grow at the end (a conversation) become ``add`` operations at ``/-``.

The diff is *type-exact*: ``1`` and ``True``, ``0`` and ``False``, ``1`` and ``1.0``, ``0.0``
and ``-0.0`` are different JSON values, so changing one into another yields a patch. Python's
``==`` calls each of those pairs equal, and so do general-purpose JSON Patch libraries (the
``jsonpatch`` package compares with ``==``), which is why the fold keeps its own small module:
a step that writes ``True`` where ``1`` was must read ``True`` after a reload.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

from ..errors import IntegrityError
from ..events import JSON

__all__ = ["apply_patch", "make_patch", "same_json"]


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


_ATOMS = frozenset({str, int, float, bool, type(None)})
"""The JSON value types that cannot change: a copy of one is the value itself."""


def _copy(value: JSON) -> JSON:
    """A deep copy of ``value`` (what ``copy.deepcopy`` gives, without its work for the
    scalars most patches carry)."""
    return value if type(value) in _ATOMS else copy.deepcopy(value)


def make_patch(old: JSON, new: JSON) -> list[JSON]:
    """RFC 6902 operations turning ``old`` into ``new``."""
    ops: list[JSON] = []
    _diff(old, new, "", ops)
    return ops


def same_json(a: JSON, b: JSON) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value, types included: unlike ``==``,
    ``1``, ``True`` and ``1.0`` all differ, and so do ``0.0`` and ``-0.0``."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and _all_same(
            zip(a.values(), map(b.__getitem__, a), strict=True))
    if isinstance(a, list):
        return len(a) == len(b) and _all_same(zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


_BY_EQUALITY = frozenset({str, int, bool})
"""Types of which two values of the same type are the same JSON value when ``==``."""


def _all_same(pairs: Iterator[tuple[JSON, JSON]]) -> bool:
    """Whether every pair holds the same JSON value: :func:`same_json` of each, with the
    strings and integers that make up most of a document compared in place (a state
    holding a conversation compares hundreds of them on every step)."""
    for v, w in pairs:
        if v is w:
            continue
        t = type(v)
        if t is not type(w):
            return False
        if t in _BY_EQUALITY:
            if v != w:
                return False
        elif not same_json(v, w):
            return False
    return True


def _diff(old: JSON, new: JSON, path: str, ops: list[JSON]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        # Two objects: key by key (equal ones yield nothing, as same_json would find).
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in new.items():
            if key in old:
                was = old[key]
                if was is value or (type(was) is type(value) and type(value) in _BY_EQUALITY
                                    and was == value):
                    continue
                _diff(was, value, f"{path}/{_escape(key)}", ops)
            else:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}",
                            "value": _copy(value)})
        return
    if same_json(old, new):
        return
    if isinstance(old, list) and isinstance(new, list):
        n = len(old)
        if len(new) >= n and same_json(new[:n], old):
            for value in new[n:]:
                ops.append({"op": "add", "path": f"{path}/-", "value": _copy(value)})
            return
        if len(new) == n:
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                _diff(a, b, f"{path}/{i}", ops)
            return
    ops.append({"op": "replace", "path": path, "value": _copy(new)})


def apply_patch(doc: JSON, patch: list[JSON]) -> JSON:
    """Apply ``patch`` to ``doc`` in place where possible; returns the new document."""
    for op in patch:
        doc = _apply_one(doc, op)
    return doc


def _apply_one(doc: JSON, op: JSON) -> JSON:
    kind, path = op["op"], op["path"]
    if path == "":
        if kind in ("add", "replace"):
            return _copy(op["value"])
        raise IntegrityError(f"unsupported patch operation on the root: {kind}")
    tokens = path.split("/")[1:]
    if "~" in path:
        tokens = [_unescape(t) for t in tokens]
    parent = doc
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    last = tokens[-1]
    value = _copy(op.get("value"))
    if isinstance(parent, list):
        if kind == "add":
            if last == "-":
                parent.append(value)
            else:
                parent.insert(int(last), value)
        elif kind == "replace":
            parent[int(last)] = value
        elif kind == "remove":
            del parent[int(last)]
        else:
            raise IntegrityError(f"unsupported patch operation {kind!r}")
    elif kind in ("add", "replace"):
        parent[last] = value
    elif kind == "remove":
        del parent[last]
    else:
        raise IntegrityError(f"unsupported patch operation {kind!r}")
    return doc
