"""What a span may record of a call's arguments or result: only the fields its tool opts
in to (``trace_args``, ``trace_result``), never one it declares sensitive."""

from __future__ import annotations

import json
from typing import Any

from ..events import JSON

Attribute = str | bool | int | float
"""A span attribute's value."""


def recorded(prefix: str, value: JSON, chosen: bool | tuple[str, ...],
             hidden: frozenset[str]) -> dict[str, Attribute]:
    """The span attributes recording ``value`` (a call's arguments or result).

    Every field is recorded when ``chosen`` is True; else the fields at the dotted paths
    ``chosen`` names. A field named in ``hidden`` is never recorded, at any depth. A
    scalar is recorded as it is, a list or null as JSON, an object as one attribute per
    field (``prefix.field``).

    Args:
        prefix: The attributes' common name.
        value: The arguments or result.
        chosen: True, or the dotted paths of the fields to record.
        hidden: Field names never recorded.
    """
    out: dict[str, Attribute] = {}
    if chosen is True:
        _flatten(prefix, value, hidden, out)
    elif chosen:
        for path in chosen:
            found: Any = value
            for part in path.split("."):
                if not isinstance(found, dict) or part not in found:
                    break
                found = found[part]
            else:
                _flatten(f"{prefix}.{path}", found, hidden, out)
    return out


def _flatten(name: str, value: JSON, hidden: frozenset[str],
             out: dict[str, Attribute]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in hidden:
                _flatten(f"{name}.{k}", v, hidden, out)
    elif isinstance(value, str | bool | int | float):
        out[name] = value
    else:
        out[name] = json.dumps(_scrub(value, hidden), sort_keys=True, separators=(",", ":"))


def _scrub(value: JSON, hidden: frozenset[str]) -> JSON:
    if isinstance(value, dict):
        return {k: _scrub(v, hidden) for k, v in value.items() if k not in hidden}
    if isinstance(value, list):
        return [_scrub(v, hidden) for v in value]
    return value
