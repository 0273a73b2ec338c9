"""The words of a text, as every knowledge backend indexes and searches them.

A word is a run of letters, digits and **combining marks**, lower-cased, in NFC. Marks
(Unicode categories Mn, Mc, Me) belong to the word they sit in: the vowel signs, viramas
and nasalisation marks of Indic scripts (``हिंदी``, ``ग्राहक``, ``தமிழில்``, ``বাংলা``) are
marks, and splitting at them cuts a word into unrelated letters. Format characters
(category Cf: the zero-width joiner and non-joiner that shape Indic conjuncts, the word
joiner, a soft hyphen) neither end a word nor count in it, so a word typed with or without
them is the same word; the zero-width space separates words. Everything else — spaces,
punctuation, symbols, ``_`` — separates words, so an e-mail address, a URL or a code such
as ``INV-2024-001`` is its parts.

This is Unicode's default word boundary rule (UAX #29) for letters, marks and format
characters, without its joining of words across ``.``, ``'`` or ``:``. Python computes it,
from its own Unicode database (letters and numbers are what ``str.isalnum`` accepts), and
the databases index the words it gives them: SQLite and PostgreSQL find what the in-memory
backend finds, whatever their own tokenizers or locale would make of the text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache

__all__ = ["MAX_WORD_CHARS", "index_words", "words"]

MAX_WORD_CHARS = 100
"""Longer "words" (pasted hashes, base64) are neither indexed nor searched."""

# Letters, digits and marks sit in planes 0 to 3, format characters in planes 0, 1 and 14;
# the other planes hold none, so the scan takes a few hundredths of a second, once.
_SCANNED = (range(0x40000), range(0xE0000, 0xE1000))
_ZWSP = 0x200B
"""The zero-width space: a format character that separates words (UAX #29), where the
others (joiners, the word joiner, a soft hyphen) do not."""


@dataclass(frozen=True, slots=True)
class _Classes:
    bmp: re.Pattern[str]
    """A word in text of the Basic Multilingual Plane only."""
    every: re.Pattern[str]
    """A word in any text."""
    astral: re.Pattern[str]
    """A character outside the Basic Multilingual Plane."""
    formats: re.Pattern[str]
    """A format character."""
    drop: dict[int, str | None]
    """Format characters, deleted by ``str.translate`` (the zero-width space, which
    separates words, made a space)."""


@cache
def _classes() -> _Classes:
    word: list[int] = []
    formats: list[int] = []
    for block in _SCANNED:
        for cp in block:
            category = unicodedata.category(chr(cp))
            if category[0] in "LNM":
                word.append(cp)
            elif category == "Cf":
                formats.append(cp)
    # A class of plain ranges within the Basic Multilingual Plane is tested with a bitmap;
    # one reaching beyond it range by range, several times slower. Letters (L) and digits
    # and numbers (N) are what str.isalnum accepts, marks (M) what it misses; "_", which
    # \w takes for a letter, is in neither, and format characters are dropped first.
    bmp = _ranges([cp for cp in word if cp < 0x10000])
    beyond = _ranges([cp for cp in word if cp >= 0x10000])
    return _Classes(
        bmp=re.compile(f"[{bmp}]+"), every=re.compile(f"(?:[{bmp}]|[{beyond}])+"),
        astral=re.compile("[\U00010000-\U0010FFFF]"),
        formats=re.compile(f"[{_ranges(formats)}]"),
        drop={**dict.fromkeys(formats), _ZWSP: " "})


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
    c = _classes()
    text = unicodedata.normalize("NFC", text)
    if c.formats.search(text):
        text = text.translate(c.drop)
    run = c.every if c.astral.search(text) else c.bmp
    return [w.lower() for w in run.findall(text)]


def index_words(text: str) -> list[str]:
    """The words of ``text`` a search can find, in order: those of at most
    :data:`MAX_WORD_CHARS` characters."""
    return [w for w in words(text) if len(w) <= MAX_WORD_CHARS]
