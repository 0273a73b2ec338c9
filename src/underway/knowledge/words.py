"""The words of a text, as every knowledge backend indexes and searches them.

A word is a run of letters, digits and **combining marks**, lower-cased, in NFC. Marks
(Unicode categories Mn, Mc, Me) belong to the word they sit in: the vowel signs, viramas
and nasalisation marks of Indic scripts (``हिंदी``, ``ग्राहक``, ``தமிழில்``, ``বাংলা``) are
marks, and splitting at them cuts a word into unrelated letters. Format characters
(category Cf: the zero-width joiner and non-joiner that shape Indic conjuncts, a soft
hyphen) inside a word neither end it nor count in it, so a word typed with or without them
is the same word. Everything else — spaces, punctuation, symbols — separates words, so an
e-mail address, a URL or a code such as ``INV-2024-001`` is its parts.

This is Unicode's default word boundary rule (UAX #29) for letters, marks and format
characters, without its joining of words across ``.``, ``'`` or ``:``. Python computes it
(its own Unicode database: the one ``str.isalnum`` and ``re``'s ``\\w`` use), and the
databases index the words it gives them: SQLite and PostgreSQL find what the in-memory
backend finds, whatever their own tokenizers or locale would make of the text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

__all__ = ["MAX_WORD_CHARS", "index_words", "words"]

MAX_WORD_CHARS = 100
"""Longer "words" (pasted hashes, base64) are neither indexed nor searched."""

# Marks and format characters sit in planes 0, 1 and 14; the other planes hold none (the
# CJK ideographs of planes 2 and 3 are letters, matched by \w), so the scan is 0.05 s
# instead of 0.25 s for every code point.
_SCANNED = (range(0x40000), range(0xE0000, 0xE1000))


@cache
def _classes() -> tuple[re.Pattern[str], dict[int, None]]:
    marks: list[int] = []
    formats: list[int] = []
    for block in _SCANNED:
        for cp in block:
            category = unicodedata.category(chr(cp))
            if category[0] == "M":
                marks.append(cp)
            elif category == "Cf":
                formats.append(cp)
    letter = rf"[^\W_]|[{_ranges(marks)}]"
    pattern = re.compile(rf"(?:{letter})(?:{letter}|[{_ranges(formats)}])*")
    return pattern, dict.fromkeys(formats)


def _ranges(points: list[int]) -> str:
    """A regular expression character class body for the sorted code points ``points``."""
    parts = []
    start = prev = points[0]
    for cp in [*points[1:], -1]:
        if cp == prev + 1:
            prev = cp
            continue
        parts.append(re.escape(chr(start)) if start == prev
                     else f"{re.escape(chr(start))}-{re.escape(chr(prev))}")
        start = prev = cp
    return "".join(parts)


def words(text: str) -> list[str]:
    """The words of ``text`` in order, repeats included: runs of letters, digits and
    combining marks (format characters inside dropped), lower-cased, in NFC."""
    pattern, formats = _classes()
    found = pattern.findall(unicodedata.normalize("NFC", text))
    return [w.translate(formats).lower() for w in found]


def index_words(text: str) -> list[str]:
    """The words of ``text`` a search can find, in order: those of at most
    :data:`MAX_WORD_CHARS` characters."""
    return [w for w in words(text) if len(w) <= MAX_WORD_CHARS]
