"""Provenance per value: which arguments of a proposed call come from trusted sources.

Taint (:mod:`underway.guard.taint`) says whether a model's context holds untrusted
content. Provenance says, for each argument of a call the model proposes from such a
context, whether it is **derivable from trusted sources**: the run's goal and input (unless
its lineage is tainted), the flow's constants, a person's answers, and the results of
trusted tools called with trusted arguments. Those values form a :class:`Corpus`.

An argument is trusted only when every value in it is found whole in the corpus: a string
as an exact trusted value or a span of whole words of trusted text (it starts and ends
where a word does, between spaces or edge punctuation, so ``ACC-1234`` is not found in
``ACC-1234-5678`` nor ``corp.example`` in ``bob@corp.example``), a number as a number some
trusted text holds (written plainly: ``1,000`` and ``1000.0`` are 1000, but ``4,5`` is no
number, ``007`` is not 7 and ``1.2.3`` holds no 1.2), ``true``/``false``/``null`` only as
the argument's default. Digits are ASCII digits only. Anything else is untrusted, so the
check can only err towards holding: padding, an encoding, a value split across calls or
passed through an echo changes the value and it is no longer found. Unknown provenance is
untrusted.

Three rules follow (:func:`assess`):

- A tool declares which arguments may carry untrusted content (``untrusted_args``); an
  untrusted argument that may not carries :data:`UNTRUSTED_ARG` and
  ``untrusted-arg:<name>``.
- A call of a tool that the trusted plan did not ask for carries :data:`UNREQUESTED`.
- The context's own labels (:func:`~underway.guard.taint.taint_labels`) stay, as an input
  to policies that want them.

The default policy (:data:`~underway.guard.policy.DEFAULT_POLICY`) holds a call for a
person on the first two only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from ..effects import Tool
from .taint import exposed, taint_labels

__all__ = [
    "UNREQUESTED",
    "UNTRUSTED_ARG",
    "ArgTrace",
    "Assessment",
    "Corpus",
    "Mark",
    "assess",
    "far_pointers",
    "mark_answer",
    "split_fields",
    "trace_args",
]

UNTRUSTED_ARG = "untrusted-arg"
"""The label of a call with an argument that carries untrusted content and may not."""
UNREQUESTED = "unrequested"
"""The label of a call from a tainted context that no trusted source asked for."""

_SHORT = 4
"""Strings shorter than this are trusted only as a whole trusted value or word."""
_DIGITS = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
_NUMBER = re.compile(r"(?<![\w.,-])-?" + _DIGITS + r"(?![\w]|[.,][0-9]|-\w)")
"""A number written plainly in text: ASCII digits, commas only between groups of three, not
part of a word or code (``INV-7``, ``555-1234``), a version (``1.2.3``) or a list
(``4,5``)."""
_PLAIN = re.compile(r"-?(?:0|[1-9][0-9]{0,2}(?:,[0-9]{3})+|[1-9][0-9]*)(?:\.[0-9]+)?")
"""A string that reads as a number, and no other: no leading zeros (``007`` is a code)."""
_EDGE = "\"'()[]{}<>,.;:!?*`#\u201c\u201d\u2018\u2019\u00ab\u00bb"
_DATETIME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[T ]([0-9]{1,2}:[0-9]{2})(?::00)?")
"""A date and a time, each of which trusted text may hold on its own."""
_SEP = "\n\x00\n"
"""Between the trusted texts searched as one: a value holding a NUL is searched text by
text, so that no span crosses from one trusted text into the next."""


def _spanned(text: str, hay: str) -> bool:
    """Whether ``text`` is a span of whole words of ``hay``: it starts after a space (or the
    start) and any opening punctuation, and ends before a space (or the end), after any
    closing punctuation or a possessive ``'s``. A value cut out of a longer token (an
    account out of ``ACC-1234-5678``, a domain out of an address) is not one.

    Each character of ``hay`` is walked at most once past the search itself: a walk that
    reaches the previous occurrence (or the previous walk's punctuation) reuses its answer,
    so a long run of punctuation costs no more than its length."""
    n, size = len(text), len(hay)
    back_at, back_ok = -1, False
    fwd_from, fwd_to, fwd_ok = -1, -1, False
    at = hay.find(text)
    while at != -1:
        i, opened = at, None
        while i > 0 and hay[i - 1] in _EDGE:
            i -= 1
            if i == back_at:
                opened = back_ok
                break
        if opened is None:
            opened = i == 0 or hay[i - 1].isspace()
        back_at, back_ok = at, opened
        if opened:
            j = at + n
            if hay.startswith(("'s", "\u2019s"), j):
                j += 2
            if fwd_from <= j <= fwd_to:
                closed = fwd_ok
            else:
                k = j
                while k < size and hay[k] in _EDGE:
                    k += 1
                closed = k == size or hay[k].isspace()
                fwd_from, fwd_to, fwd_ok = j, k, closed
            if closed:
                return True
        at = hay.find(text, at + 1)
    return False


def _norm(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip()


def _number(value: Any) -> str | None:
    """The canonical form of a number (``1,250.00`` and ``1250`` alike), or None."""
    text = str(value).replace(",", "") if not isinstance(value, float) else repr(value)
    try:
        d = Decimal(text)
    except (InvalidOperation, ValueError):
        return None
    if not d.is_finite():
        return None
    d = d.normalize()
    return format(d if d != 0 else Decimal(0), "f")


@dataclass
class Corpus:
    """The values trusted sources put in a model's context.

    Build it with :meth:`add` (a JSON value) and :meth:`add_text` (text); ask it with
    :meth:`derives`.
    """

    atoms: set[str] = field(default_factory=set)
    """Whole trusted values and words."""
    numbers: set[str] = field(default_factory=set)
    """Every number trusted content holds, canonical."""
    texts: list[str] = field(default_factory=list)
    """Trusted strings, searched for spans of whole words."""
    listed: Corpus | None = field(default=None, repr=False, compare=False)
    """What trusted tools gave back, apart from what a person or the flow stated: a value
    found only there is one of several a tool listed, so untrusted content that names it
    may have chosen it (:func:`trace_args`)."""
    _hay: str | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, value: Any, *, listed: bool = False) -> None:
        """Add a trusted JSON value: each of its strings, numbers and keys.

        Args:
            value: The value.
            listed: A trusted tool gave it back (else a person or the flow stated it).
        """
        if listed:
            if self.listed is None:
                self.listed = Corpus()
            self.listed.add(value)
            return
        for leaf in _leaves(value, keys=True):
            if isinstance(leaf, str):
                self.add_text(leaf)
            elif (not isinstance(leaf, bool) and isinstance(leaf, int | float)
                  and (n := _number(leaf)) is not None):
                self.numbers.add(n)

    def add_text(self, text: str) -> None:
        """Add trusted text: the whole of it, its words and its numbers."""
        text = _norm(text)
        if not text:
            return
        self.atoms.add(text)
        self.texts.append(text)
        self._hay = None
        words = text.split()
        self.atoms.update(words)
        self.atoms.update([word.strip(_EDGE) for word in words])
        for m in _NUMBER.finditer(text):
            if _PLAIN.fullmatch(m.group()) and (n := _number(m.group())) is not None:
                self.numbers.add(n)

    def derives(self, value: Any) -> bool:
        """Whether ``value`` (a string or number) is found whole in trusted content.

        Args:
            value: The value.
        """
        return self.stated(value) or (self.listed is not None and self.listed.derives(value))

    def stated(self, value: Any) -> bool:
        """Whether ``value`` is found whole in what a person or the flow stated (not only
        in what trusted tools listed). A date and time (``2026-12-10 12:00``) is found when
        its date and its time are.

        Args:
            value: The value.
        """
        if isinstance(value, str) and (when := _DATETIME.fullmatch(_norm(value))):
            return self.stated(when.group(1)) and self.stated(when.group(2))
        if isinstance(value, bool) or value is None:
            return False
        if isinstance(value, int | float):
            return (n := _number(value)) is not None and n in self.numbers
        text = _norm(str(value))
        if not text or text in self.atoms:
            return True
        if _PLAIN.fullmatch(text) and (n := _number(text)) is not None and n in self.numbers:
            return True
        if len(text) < _SHORT:
            return False
        if "\x00" in text:
            return any(_spanned(text, t) for t in self.texts)
        if self._hay is None:
            self._hay = _SEP.join(self.texts)
        return _spanned(text, self._hay)


@dataclass(frozen=True, slots=True)
class ArgTrace:
    """Where one argument of a proposed call could have come from."""

    name: str
    """The argument (a top-level field)."""
    trusted: bool
    """Derivable from trusted sources alone."""
    sources: tuple[str, ...] = ()
    """The untrusted sources it could come from: those whose content it repeats, else
    every source the context took in (it may be an encoding of any)."""
    repeats: bool = False
    """It repeats content of :attr:`sources` verbatim."""
    points_to: tuple[str, ...] = ()
    """The links and addresses inside it that no trusted source holds: in an argument
    that may carry untrusted content, where that content sends its reader still may not
    come from there."""

    def to_json(self) -> dict[str, Any]:
        """The trace as evidence: ``{"arg", "trusted", "sources", "repeats"}``, and
        ``points_to`` when it holds any."""
        out: dict[str, Any] = {"arg": self.name, "trusted": self.trusted,
                               "sources": list(self.sources), "repeats": self.repeats}
        if self.points_to:
            out["points_to"] = list(self.points_to)
        return out


def _leaves(value: Any, *, keys: bool = False, skip: Collection[str] = ()) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if keys and str(k) not in skip:
                yield str(k)
            yield from _leaves(v, keys=keys, skip=skip)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v, keys=keys, skip=skip)
    else:
        yield value


def _repeated_in(leaves: Sequence[Any], blocks: Iterable[tuple[str, str]]) -> list[str]:
    """The sources of ``blocks`` (source, lower-cased text) that hold a leaf verbatim, as
    whole words. A leaf shorter than four characters is found anywhere by chance: it
    names no source of its own (the caller names every source)."""
    needles = [n for n in (_norm(str(v)).lower() for v in leaves
                           if v is not None and not isinstance(v, bool)) if len(n) >= _SHORT]
    found: list[str] = []
    for source, text in blocks:
        if source not in found and any(_spanned(n, text) for n in needles):
            found.append(source)
    return found


def _chosen(leaves: Sequence[Any], corpus: Corpus,
            blocks: Callable[[], Sequence[tuple[str, str]]]) -> list[Any]:
    """The leaves that only a trusted tool's listing accounts for and that untrusted
    content (``blocks()``, read only when such a leaf exists) names as a whole word: the
    injection may have picked them out of the list."""
    if corpus.listed is None:
        return []
    only = [v for v in leaves if isinstance(v, str) and len(_norm(v)) >= _SHORT
            and not corpus.stated(v) and corpus.listed.derives(v)]
    return [v for v in only if any(_spanned(_norm(v).lower(), text) for _, text in blocks())]


def trace_args(args: Any, corpus: Corpus, *, taint: Sequence[str],
               blocks: Iterable[tuple[str, str]] = (),
               defaults: Mapping[str, Any] | None = None,
               structure: Collection[str] = ()) -> list[ArgTrace]:
    """Trace each top-level argument of a call proposed from a context holding ``taint``.

    Args:
        args: The call's arguments (a JSON object; anything else is one argument, ``*``).
        corpus: What trusted sources put in the context.
        taint: The sources of the untrusted content in the context, in order; empty means
            a clean context, whose arguments are all trusted.
        blocks: The untrusted content, as (source, lower-cased text): which of it an
            argument repeats names its sources.
        defaults: Each argument's declared default: an argument equal to it is a
            constant of the tool, trusted.
        structure: Key names that are the schema's own (field names), not content.
    """
    items = args.items() if isinstance(args, Mapping) else [("*", args)]
    read: list[list[tuple[str, str]]] = []

    def listed() -> list[tuple[str, str]]:
        # The untrusted content is read once, and only for an argument that needs it: a
        # call whose arguments are all stated reads none of the conversation's blocks.
        if not read:
            read.append(list(blocks))
        return read[0]

    traces: list[ArgTrace] = []
    for name, value in items:
        name = str(name)
        if not taint or (defaults is not None and name in defaults
                         and defaults[name] == value):
            traces.append(ArgTrace(name, True))
            continue
        leaves = [v for v in _leaves(value, keys=True, skip=structure)
                  if not (isinstance(v, str) and not v.strip())]
        chosen = _chosen(leaves, corpus, listed)
        if not chosen and all(corpus.derives(v) for v in leaves):
            traces.append(ArgTrace(name, True))
            continue
        repeated = _repeated_in([v for v in leaves if not corpus.derives(v)] + chosen, listed())
        traces.append(ArgTrace(name, False, tuple(repeated or taint), bool(repeated)))
    return traces


@dataclass(frozen=True, slots=True)
class Assessment:
    """What provenance says of one proposed call (:func:`assess`)."""

    traces: tuple[ArgTrace, ...]
    """Each argument's provenance."""
    held: tuple[ArgTrace, ...]
    """The untrusted arguments the tool does not let carry untrusted content."""
    requested: bool
    """Whether a trusted source asked for a call of this tool."""
    labels: tuple[str, ...]
    """The call's labels for the policy."""

    def evidence(self) -> dict[str, Any]:
        """What an approver reads: each argument's provenance, and what held the call."""
        return {"provenance": [t.to_json() for t in self.traces],
                "held_by": [t.to_json() for t in self.held],
                "requested": self.requested}

    def risks(self) -> list[str]:
        """One sentence per reason to hold the call, naming the argument and its source."""
        out = [f"argument {t.name!r} "
               + (f"points to {', '.join(t.points_to)}, which no trusted source holds; it "
                  if t.points_to else "is not derivable from trusted sources; it ")
               + f"{'repeats content of' if t.repeats else 'may come from'} "
               f"{', '.join(t.sources)}" for t in self.held]
        if not self.requested:
            out.append("no trusted source asked for a call of this tool (a plan made before "
                       "untrusted content was read, or the tools the flow declares it "
                       "writes with)")
        return out


def assess(tool: Tool, args: Any, corpus: Corpus, *, taint: Sequence[str],
           requested: Collection[str] | None,
           blocks: Iterable[tuple[str, str]] = (), label: bool | None = None) -> Assessment:
    """Assess a call of ``tool`` that a model proposed from a context holding ``taint``.

    Args:
        tool: The tool.
        args: The proposed arguments.
        corpus: What trusted sources put in the context.
        taint: The context's untrusted sources; empty means clean (nothing is labelled).
        requested: The tools a trusted source asked for (a plan made from a clean
            context); None means none is known, so every call from a tainted context is
            unrequested.
        blocks: The untrusted content (source, lower-cased text), to name what an
            argument repeats.
        label: Whether the call is labelled at all; None means when the tool is
            :func:`~underway.guard.taint.exposed`. An unlabelled call is still traced:
            what a trusted tool gives back for untrusted arguments is untrusted.
    """
    if not taint:
        return Assessment(tuple(trace_args(args, corpus, taint=())), (), True, ())
    model = tool.args_model
    fields = getattr(model, "model_fields", {}) or {}
    defaults = {n: f.default for n, f in fields.items() if not f.is_required()}
    traces = trace_args(args, corpus, taint=taint, blocks=blocks, defaults=defaults,
                        structure=_field_names(model))
    if not (exposed(tool) if label is None else label):
        return Assessment(tuple(traces), (), True, ())
    held = tuple(t if t.name not in tool.untrusted_args else replace(t, points_to=far)
                 for t in traces if not t.trusted and (
                     t.name not in tool.untrusted_args
                     or (far := far_pointers(args.get(t.name) if isinstance(args, Mapping)
                                          else args, corpus))))
    ok = requested is not None and tool.name in requested
    labels = list(taint_labels(taint))
    if held:
        labels.append(UNTRUSTED_ARG)
        labels += [f"{UNTRUSTED_ARG}:{t.name}" for t in held]
    if not ok:
        labels.append(UNREQUESTED)
    return Assessment(tuple(traces), held, ok, tuple(labels))


_POINTER = re.compile(r"(?i)\b(?:https?://|www\.)[^\s<>\"']+"
                      r"|(?<![\w.+-])[\w.+-]++@[\w-]++(?:\.[\w-]++)+")
"""A link or an e-mail address inside text. An address is sought from the start of its run
of characters only, so a long run without an ``@`` costs its length, not its square."""


def far_pointers(value: Any, corpus: Corpus) -> tuple[str, ...]:
    """The links and e-mail addresses in ``value``'s strings that ``corpus`` does not
    derive: where untrusted content would send its reader.

    Args:
        value: A JSON value (an argument).
        corpus: What trusted sources put in the context.
    """
    found = [m.group().rstrip(".,;:!?)") for leaf in _leaves(value) if isinstance(leaf, str)
             for m in _POINTER.finditer(leaf)]
    return tuple(dict.fromkeys(p for p in found if not corpus.derives(p)))


def split_fields(value: Any, paths: Sequence[str]) -> tuple[Any, Any]:
    """``value`` split at dotted ``paths`` (list items are crossed): the part the paths
    name (a tool's ``trusted_fields``), and the rest.

    Args:
        value: A tool's result (JSON).
        paths: Dotted paths such as ``emails.id``.
    """
    split = [p.split(".") for p in paths]

    def walk(node: Any, ways: list[list[str]], keep: bool) -> Any:
        if isinstance(node, list):
            kept = [walk(v, ways, keep) for v in node]
            return [k for k in kept if k is not None] if keep else kept
        if not isinstance(node, dict):
            return None if keep else node
        out: dict[str, Any] = {}
        for k, v in node.items():
            ends = any(w == [k] for w in ways)
            deeper = [w[1:] for w in ways if len(w) > 1 and w[0] == k]
            if keep:
                if ends:
                    out[k] = v
                elif deeper and (inner := walk(v, deeper, True)) not in (None, {}, []):
                    out[k] = inner
            elif not ends:
                out[k] = walk(v, deeper, False) if deeper else v
        return out

    return walk(value, split, True), walk(value, split, False)


def _field_names(model: Any) -> frozenset[str]:
    """Every property name in ``model``'s JSON schema, at any depth."""
    schema = getattr(model, "model_json_schema", None)
    if schema is None:
        return frozenset()
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            props = node.get("properties")
            if isinstance(props, Mapping):
                names.update(str(k) for k in props)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema())
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Mark:
    """A part of a run's answer that trusted sources do not account for."""

    path: str
    """Where in the result (``result``, ``result.items[0]``)."""
    sources: tuple[str, ...]
    """The untrusted sources it repeats, else every source that could have shaped it."""
    repeats: bool
    """It repeats untrusted content verbatim."""

    def to_json(self) -> dict[str, Any]:
        """``{"path", "sources", "repeats"}``."""
        return {"path": self.path, "sources": list(self.sources), "repeats": self.repeats}


def _paths(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _paths(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _paths(v, f"{path}[{i}]")
    else:
        yield path, value


def mark_answer(result: Any, corpus: Corpus, *, taint: Sequence[str],
                blocks: Iterable[tuple[str, str]] = (), root: str = "result") -> list[Mark]:
    """The parts of a run's answer that trusted sources do not account for.

    In a clean context nothing is marked. In a tainted one every string or number the
    corpus does not derive is marked: with the sources whose text it repeats (``repeats``),
    else with every source of the context.

    Args:
        result: The answer.
        corpus: What trusted sources put in the context.
        taint: The context's untrusted sources.
        blocks: The untrusted content (source, lower-cased text).
        root: The path of ``result`` itself.
    """
    if not taint:
        return []
    flats = [(source, " ".join(body.split())) for source, body in blocks]
    listed = [(source, flat, _grams(flat.split())) for source, flat in flats]
    marks: list[Mark] = []
    for path, leaf in _paths(result, root):
        if leaf is None or isinstance(leaf, bool) or corpus.derives(leaf):
            continue
        if isinstance(leaf, str) and not leaf.strip():
            continue
        repeated = _spans_repeated(str(leaf), listed)
        marks.append(Mark(path, tuple(repeated or taint), bool(repeated)))
    return marks


_SPAN_WORDS = 4


def _grams(words: Sequence[str]) -> set[tuple[str, ...]]:
    """Every run of four words, edge punctuation left off: a set, so that an answer is
    matched against a long block in time linear in both."""
    bare = [w.strip(_EDGE) for w in words]
    return {tuple(bare[i:i + _SPAN_WORDS]) for i in range(max(0, len(bare) - _SPAN_WORDS + 1))}


def _spans_repeated(text: str,
                    blocks: Sequence[tuple[str, str, set[tuple[str, ...]]]]) -> list[str]:
    """The sources whose text (source, flattened text, its runs of words) holds the whole
    of ``text`` as whole words, or any run of four of its words: an answer that quotes
    part of an injected instruction repeats it. A value shorter than four characters (a
    count, a code) is found in any text by chance: it never repeats on its own."""
    low = " ".join(_norm(text).lower().split())
    spans = _grams(low.split())
    whole = len(low) >= _SHORT
    found: list[str] = []
    for source, flat, grams in blocks:
        if source not in found and ((whole and _spanned(low, flat))
                                    or not spans.isdisjoint(grams)):
            found.append(source)
    return found
