"""What an agent's trusted sources put in its model's context, read back from its state.

The corpus (:class:`~underway.guard.provenance.Corpus`) is rebuilt from the journaled
conversation at every step, so it survives restarts and takeovers with the state it is
read from: the flow's constants (the instructions), the goal and input of a run whose
lineage is clean, and the messages vouched for (a person's answer, a trusted tool's result
for trusted arguments).

What the run itself wrote does not come back trusted. A value the model passed to a tool
from a tainted context, that trusted sources did not account for then, may have been stored
(a note, a draft, a ticket, memory); a trusted tool reading it back later vouches for its
store, not for that value. So the parts of a later trusted result that hold such a value, or
are held in one, are left out of the corpus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from ..guard.provenance import (
    _PLAIN,
    _SEP,
    _SHORT,
    Corpus,
    _leaves,
    _norm,
    _number,
    _spanned,
    split_fields,
)
from ._actions import _OWN_ACTIONS

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


_WORD = re.compile(r"\w+")


class _Written:
    """The values a run passed to its tools from a tainted context that trusted sources did
    not account for when it did: what it may have stored with attacker content in it."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.numbers: set[str] = set()
        self._exact: set[str] = set()
        self._words: set[str] = set()
        self._hay: str | None = None

    def note(self, args: Any, corpus: Corpus) -> None:
        for leaf in _leaves(args):
            if leaf is None or isinstance(leaf, bool) or corpus.derives(leaf):
                continue
            if isinstance(leaf, int | float):
                if (n := _number(leaf)) is not None:
                    self.numbers.add(n)
                continue
            text = _norm(str(leaf))
            if text:
                self.texts.append(text.casefold())
                self._exact.add(text.casefold())
                self._words.update(_WORD.findall(text.casefold()))
                self._hay = None
                if _PLAIN.fullmatch(text) and (n := _number(text)) is not None:
                    self.numbers.add(n)

    def holds(self, leaf: Any) -> bool:
        """Whether ``leaf`` of a later trusted result holds a written value, or is a span
        of whole words of one."""
        if isinstance(leaf, bool) or leaf is None:
            return False
        if isinstance(leaf, int | float):
            return _number(leaf) in self.numbers
        text = _norm(str(leaf)).casefold()
        if not text:
            return False
        if _PLAIN.fullmatch(text) and _number(text) in self.numbers:
            return True
        if text in self._exact or any(len(w) >= _SHORT and len(w) <= len(text) and w in text
                                      for w in self.texts):
            return True
        if len(text) < _SHORT:
            return False
        # A span of whole words holds only whole runs of word characters of the written
        # text (its edges are spaces or punctuation): a run the text lacks rules it out.
        runs = _WORD.findall(text)
        if runs and not self._words.issuperset(runs):
            return False
        if "\x00" in text:
            return any(_spanned(text, w) for w in self.texts)
        if self._hay is None:
            self._hay = _SEP.join(self.texts)
        return _spanned(text, self._hay)


def _pieces(args: Any) -> list[str]:
    """The values of a call's arguments as text, longest first."""
    found: set[str] = set()
    for leaf in _leaves(args):
        if leaf is None or isinstance(leaf, bool):
            continue
        text = _norm(repr(leaf) if isinstance(leaf, float) else str(leaf))
        if text:
            found.add(text)
            if isinstance(leaf, int | float) and (n := _number(leaf)) is not None:
                found.add(n)
    return sorted(found, key=lambda p: (-len(p), p))


def _strip(value: Any, drop: Callable[[Any], bool]) -> Any:
    """``value`` without its parts that ``drop`` (None in their place; keys left out)."""
    if isinstance(value, Mapping):
        return {k: _strip(v, drop) for k, v in value.items() if not drop(str(k))}
    if isinstance(value, list | tuple):
        return [_strip(v, drop) for v in value]
    return None if drop(value) else value


def _composed(args: Any) -> Callable[[Any], bool]:
    """Whether a value a trusted tool gave back for ``args`` is one it built by putting two
    of their values side by side (a join, a format): the model chose the pieces, and short
    ones (a digit, a word) are trusted only because trusted text holds them somewhere."""
    pieces = _pieces(args)
    if not pieces:
        return lambda value: False
    alt = "(?:" + "|".join(re.escape(p) for p in pieces) + ")"
    pair = re.compile(alt + r"[\W_]*" + alt)
    known = set(pieces)

    def built(value: Any) -> bool:
        if value is None or isinstance(value, bool):
            return False
        text = _norm(repr(value) if isinstance(value, float) else str(value))
        return text not in known and pair.search(text) is not None
    return built


def corpus_of(instructions: str, goal: str | None, context: Any,
              messages: Sequence[Mapping[str, Any]], vouched: Iterable[int], *,
              tainted: bool = False, fields: Mapping[int, Sequence[str]] | None = None,
              ) -> Corpus:
    """The corpus of an agent's context.

    It is read in the conversation's order. Once the context is tainted, each value the
    model passes to a tool that the corpus does not derive then is a value the run wrote:
    the parts of later vouched messages that hold one are left out.

    Args:
        instructions: The agent's instructions, a constant of its flow.
        goal: The run's goal; None when its lineage is tainted.
        context: The run's input context; ignored when ``goal`` is None.
        messages: The conversation.
        vouched: The indices of the messages trusted per value.
        tainted: Whether the context was tainted from its start (its lineage, or a child
            outcome it received); else from its first untrusted block.
        fields: For an untrusted result of a tool called with trusted arguments, by
            index: the fields of it no outsider writes (the tool's ``trusted_fields``).
    """
    fields = fields or {}
    corpus = Corpus()
    corpus.add_text(instructions)
    if goal is not None:
        corpus.add_text(goal)
        corpus.add(context)
    trusted = set(vouched)
    # What the run wrote matters only to trusted content after it: past the last, nothing
    # is noted (a run that reads only untrusted tools notes nothing at all).
    last = max([*trusted, *fields], default=-1)
    written = _Written()
    calls: dict[str, Any] = {}
    for i, m in enumerate(messages[:last + 1]):
        content = str(m.get("content") or "")
        if i in trusted:
            body = _body(content)
            try:
                value: Any = json.loads(body)
            except ValueError:
                value = body
            # Only a tool's result: a person's words are trusted as given.
            if (given := calls.get(str(m.get("tool_call_id")))) is not None:
                if written.texts or written.numbers:
                    value = _strip(value, written.holds)
                value = _strip(value, _composed(given))
            if value is not None:
                corpus.add(value, listed=m.get("role") == "tool"
                           and m.get("name") not in _OWN_ACTIONS)
            continue
        if m.get("role") == "assistant":
            calls = {}  # the results that follow answer this turn's calls
        if i in fields and (part := _fields_of(_body(content), fields[i], keep=True)):
            if written.texts or written.numbers:
                part = _strip(part, written.holds)
            corpus.add(part, listed=True)
        if tainted:
            for call in m.get("tool_calls") or ():
                if isinstance(call, Mapping) and call.get("name") not in _OWN_ACTIONS:
                    args = call.get("arguments")
                    args = call.get("raw_arguments") if args is None else args
                    written.note(args, corpus)
                    calls[str(call.get("id"))] = args
        if not tainted and _BLOCK.search(content):
            tainted = True
    return corpus


def blocks_of(messages: Sequence[Mapping[str, Any]], vouched: Collection[int],
              carried: Mapping[int, Sequence[str]],
              taint: Sequence[str] | None = None,
              fields: Mapping[int, Sequence[str]] | None = None) -> list[tuple[str, str]]:
    """The untrusted content of a conversation as (source, lower-cased text): every block
    quoted as untrusted in a message not vouched for, named by its source, or by the
    sources a trusted tool's arguments carried. A block whose source is no source of the
    context's ``taint`` (the agent's own action: a child's outcome, its own words) is named
    by every source of it: that content came from there, not from the action. Of a result
    with ``fields`` no outsider writes, the rest is the untrusted content."""
    out: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        if i in vouched:
            continue
        for source, body in _BLOCK.findall(str(m.get("content") or "")):
            if fields and i in fields:
                body = json.dumps(_fields_of(body, fields[i], keep=False), ensure_ascii=False,
                                  sort_keys=True)
            named = carried.get(i) or (
                [source] if taint is None or source in taint or not taint else taint)
            out += [(s, body.lower()) for s in named]
    return out


def _fields_of(body: str, paths: Sequence[str], *, keep: bool) -> Any:
    """:func:`~underway.guard.provenance.split_fields` of a JSON ``body``: the part at
    ``paths``, or (``keep`` False) the rest. A body that is no JSON keeps nothing."""
    try:
        value = json.loads(body)
    except ValueError:
        return None if keep else body
    kept, rest = split_fields(value, paths)
    return kept if keep else rest


def requested_by(steps: Iterable[str], named: Iterable[str], tools: Iterable[str]) -> list[str]:
    """The tools a plan asks for: those it names, and those its steps mention by name."""
    known = list(tools)
    asked = [t for t in named if t in known]
    text = "\n".join(steps)
    asked += [t for t in known if re.search(r"(?<!\w)" + re.escape(t) + r"(?!\w)", text)]
    return list(dict.fromkeys(asked))
