"""How tool results reach the model: quoted data with provenance, never instructions.

A result is wrapped in a ``<tool_output>`` block naming its source and whether that
source is trusted; the system prompt tells the model that such blocks are data. Telling it
is not enough, so the agent also tracks taint per context (:mod:`underway.guard.taint`): once
untrusted content is in the conversation, the agent's mutating and outbound calls carry
the ``untrusted`` label whatever their arguments look like.

The untrusted blocks of the conversation are also searched for a held call's values, only
to tell an approver which of them visibly repeat untrusted content (:func:`repeated_from`).
That check is evidence for a person, never what labels a call: encodings, short values and
paraphrase all escape substring matching.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..events import JSON
from ..guard.taint import UNTRUSTED

__all__ = ["UNTRUSTED", "quote", "repeated_from", "untrusted_blocks"]

_MIN_MATCH = 4
_BLOCK = re.compile(r'<tool_output source="([^"]*)" trust="untrusted">\n(.*?)\n</tool_output>',
                    re.DOTALL)


def quote(source: str, value: JSON, *, trusted: bool) -> str:
    """``value`` as a quoted data block the model reads as data, with its provenance.

    Args:
        source: Where the value came from (a tool's name, ``signal:<name>``...).
        value: The result to quote; text as it is, anything else as JSON.
        trusted: Whether its source is trusted.
    """
    body = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True, default=str)
    # A result cannot close the block early and smuggle text outside it.
    body = body.replace("</tool_output>", "<\\/tool_output>")
    trust = "trusted" if trusted else UNTRUSTED
    return f'<tool_output source="{source}" trust="{trust}">\n{body}\n</tool_output>'


def untrusted_blocks(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Every block quoted as untrusted in ``messages``: its source and lower-cased text."""
    return [{"source": source, "text": body.lower()}
            for m in messages for source, body in _BLOCK.findall(str(m.get("content") or ""))]


def repeated_from(args: JSON, seen: Iterable[Mapping[str, str]], *,
                  trusted: str = "") -> list[str]:
    """The untrusted sources whose content reappears verbatim in ``args``.

    Only strings of at least four characters and numbers of at least four digits are
    sought. Sources come in order, without repeats. This is evidence for an approver only:
    an empty answer does not mean the arguments are clean.

    Args:
        args: A held call's arguments.
        seen: The untrusted blocks: each one's source and lower-cased text
            (:func:`untrusted_blocks`).
        trusted: Trusted text (the goal, trusted results). A value that also appears in it
            may have come from there, and is not attributed.
    """
    needles = [n for n in (v.lower() for v in _leaves(args)) if n not in trusted]
    found: list[str] = []
    for item in seen:
        if item["source"] in found:
            continue
        if any(n in item["text"] for n in needles):
            found.append(item["source"])
    return found


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        text = format(value, "g") if isinstance(value, float) else str(value)
        if sum(c.isdigit() for c in text) >= _MIN_MATCH:
            yield text
    elif isinstance(value, str) and len(value.strip()) >= _MIN_MATCH:
        yield value.strip()
