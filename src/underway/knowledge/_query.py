"""Turning what a user or a model typed into a safe, validated search.

Every backend matches the same thing: the words of the query (runs of letters, digits and
combining marks, lower-cased: :mod:`underway.knowledge.words`), any of them, ranked by
relevance. Operators, quotes, wildcards and punctuation in the query are never interpreted,
so no query string can fail to parse or change what a search may see.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..errors import ConfigurationError
from ._record import SENSITIVITIES, Sensitivity
from .base import check_key
from .words import MAX_WORD_CHARS, words

MAX_TERMS = 32
"""Words of a query beyond this many are ignored."""
MAX_TERM_CHARS = MAX_WORD_CHARS
"""Longer "words" (pasted hashes, base64) are ignored: no text is indexed under them."""
MAX_LIMIT = 1000
"""The most hits one search may ask for."""


@dataclass(frozen=True, slots=True)
class Search:
    """A validated search: what to match and what the reader may see."""

    tenant_id: str
    terms: tuple[str, ...]
    """Distinct query words, in the order typed; a record matches when it has any."""
    roles: tuple[str, ...]
    sensitivities: tuple[Sensitivity, ...]
    """The labels the reader may see."""
    now: float
    limit: int


def plan(
    tenant_id: str,
    query: str,
    *,
    roles: Collection[str],
    now: float,
    limit: int,
    max_sensitivity: Sensitivity,
) -> Search:
    """Check a search's arguments and extract its terms; raise ConfigurationError naming
    the bad argument."""
    check_key("tenant_id", tenant_id)
    if not isinstance(query, str):
        raise ConfigurationError(f"search query must be a string, not {type(query).__name__}")
    if isinstance(roles, str) or not all(isinstance(r, str) and r for r in roles):
        raise ConfigurationError(
            f"roles must be a collection of role names such as ('support',), not {roles!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(f"search limit must be an integer from 1 to {MAX_LIMIT}")
    if max_sensitivity not in SENSITIVITIES:
        raise ConfigurationError(
            f"unknown sensitivity {max_sensitivity!r}; use one of {', '.join(SENSITIVITIES)}"
        )
    terms = [w for w in dict.fromkeys(words(query)) if len(w) <= MAX_TERM_CHARS]
    allowed = SENSITIVITIES[: SENSITIVITIES.index(max_sensitivity) + 1]
    return Search(tenant_id, tuple(terms[:MAX_TERMS]), tuple(roles), allowed, float(now), limit)
