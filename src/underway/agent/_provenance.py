"""What an agent's trusted sources put in its model's context, read back from its state.

The corpus (:class:`~underway.guard.provenance.Corpus`) is rebuilt from the journaled
conversation at every step, so it survives restarts and takeovers with the state it is
read from: the flow's constants (the instructions), the goal and input of a run whose
lineage is clean, and every message that opens with a block quoted as trusted (a person's
answer, a trusted tool's result for trusted arguments).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ..guard.provenance import Corpus

TRUSTED_HEAD = re.compile(r'<tool_output source="[^"]*" trust="trusted">\n')
"""The opening of a block quoted as trusted, at the start of a message."""
_HEAD = re.compile(r'<tool_output source="[^"]*" trust="(?:trusted|untrusted)">\n')
_END = "\n</tool_output>"
_BLOCK = re.compile(r'<tool_output source="([^"]*)" trust="untrusted">\n(.*?)\n</tool_output>',
                    re.DOTALL)


def _body(content: str) -> str:
    """A message's quoted body when it opens with a block, else the whole of it. A quoted
    body may hold any text, a forged header included, but never its message's start."""
    head = _HEAD.match(content)
    if head and content.endswith(_END):
        return content[head.end():-len(_END)]
    return content


def corpus_of(instructions: str, goal: str | None, context: Any,
              messages: Sequence[Mapping[str, Any]], vouched: Iterable[int]) -> Corpus:
    """The corpus of an agent's context.

    Args:
        instructions: The agent's instructions, a constant of its flow.
        goal: The run's goal; None when its lineage is tainted.
        context: The run's input context; ignored when ``goal`` is None.
        messages: The conversation.
        vouched: The indices of the messages trusted per value.
    """
    corpus = Corpus()
    corpus.add_text(instructions)
    if goal is not None:
        corpus.add_text(goal)
        corpus.add(context)
    for i in vouched:
        if not 0 <= i < len(messages):
            continue
        body = _body(str(messages[i].get("content") or ""))
        try:
            corpus.add(json.loads(body))
        except ValueError:
            corpus.add_text(body)
    return corpus


def blocks_of(messages: Sequence[Mapping[str, Any]], vouched: Collection[int],
              carried: Mapping[int, Sequence[str]]) -> list[tuple[str, str]]:
    """The untrusted content of a conversation as (source, lower-cased text): every block
    quoted as untrusted in a message not vouched for, named by its source, or by the
    sources a trusted tool's arguments carried."""
    out: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        if i in vouched:
            continue
        for source, body in _BLOCK.findall(str(m.get("content") or "")):
            out += [(s, body.lower()) for s in carried.get(i) or [source]]
    return out


def requested_by(steps: Iterable[str], named: Iterable[str], tools: Iterable[str]) -> list[str]:
    """The tools a plan asks for: those it names, and those its steps mention by name."""
    known = list(tools)
    asked = [t for t in named if t in known]
    text = "\n".join(steps)
    asked += [t for t in known if re.search(r"(?<!\w)" + re.escape(t) + r"(?!\w)", text)]
    return list(dict.fromkeys(asked))
