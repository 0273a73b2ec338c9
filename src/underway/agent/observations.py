"""How tool results reach the model: quoted data with provenance, never instructions.

A result is wrapped in a ``<tool_output>`` block naming its source and whether that
source is trusted; the system prompt tells the model that such blocks are data. Results
of untrusted sources (customer e-mails, tickets, web pages) are remembered so that when
the model later proposes a call whose arguments repeat their content, the call carries
the ``untrusted`` label and the policy can hold it for a person.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..events import JSON

UNTRUSTED = "untrusted"
"""The label of content from a source nobody vouches for."""

MAX_REMEMBERED = 20_000
"""Characters of one untrusted result kept for taint checks."""

_MIN_MATCH = 4


def quote(source: str, value: JSON, *, trusted: bool) -> str:
    """``value`` as a quoted data block the model reads as data, with its provenance."""
    body = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True, default=str)
    # A result cannot close the block early and smuggle text outside it.
    body = body.replace("</tool_output>", "<\\/tool_output>")
    trust = "trusted" if trusted else UNTRUSTED
    return f'<tool_output source="{source}" trust="{trust}">\n{body}\n</tool_output>'


def remembered(source: str, value: JSON) -> dict[str, str]:
    """What the agent keeps of an untrusted result to recognise its content later."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           default=str)
    return {"source": source, "text": text[:MAX_REMEMBERED].lower()}


def tainted_by(args: JSON, seen: Iterable[dict[str, str]], *, trusted: str = "") -> list[str]:
    """The untrusted sources whose content reappears in ``args`` (strings of at least four
    characters, or numbers with at least four digits), in order, without repeats. A value
    that also appears in ``trusted`` text (the goal, trusted results) may have come from
    there and taints nothing."""
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
