"""Knowledge records at rest, and the terms a record is indexed under.

A record is indexed under its words (:func:`underway.knowledge.words.index_words`), which
every backend receives from here rather than splitting the text itself. When its store seals
payloads (``underway.crypto``), a record's text, source and metadata are sealed together
into the row's ``sealed`` column, bound to its tenant and id, and it is indexed under *blind
index terms* instead of words: a keyed hash of each word under the tenant's key, so the
full-text index (FTS5, tsvector) still finds and ranks records by the words of a query —
blinded the same way — while holding no word of the text. What leaks is what any keyed
index leaks: which records share a word, and how often. Without a sealer, records are
stored as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import ENCRYPTED, Codec, knowledge_where
from ..errors import KeyUnavailable
from ..events import canonical_json
from ._record import KnowledgeRecord
from .words import index_words

__all__ = ["opened_fields", "query_terms", "row_terms", "stored_fields"]


def stored_fields(codec: Codec, record: KnowledgeRecord) -> dict[str, Any]:
    """The ``text``, ``source``, ``metadata`` and ``sealed`` columns of ``record``, and
    ``terms``: what it is indexed under, in order (its words, or their blind terms)."""
    if codec.sealer is None:
        return {"text": record.text, "source": record.source, "metadata": record.metadata,
                "sealed": None, "terms": index_words(record.text)}
    terms = codec.sealer.terms(record.tenant_id, index_words(record.text), every_key=False)
    sealed = codec.seal(
        canonical_json({"text": record.text, "source": record.source,
                        "metadata": record.metadata}),
        knowledge_where(record.tenant_id, record.id, record.subject),
    )
    return {"text": " ".join(terms), "source": ENCRYPTED, "metadata": {}, "sealed": sealed,
            "terms": terms}


def row_terms(
    codec: Codec, tenant_id: str, record_id: str, text: str, sealed: bytes | None
) -> list[str] | None:
    """What a stored row is indexed under by this code.

    It serves to index again the rows an earlier version wrote.

    Args:
        codec: The codec.
        tenant_id: The row's tenant.
        record_id: The row's record id.
        text: The row's text.
        sealed: The row's sealed fields, if sealed.

    Returns:
        Its words, or for a sealed row the blind terms of its words. None when the row is
        sealed and its tenant's keys are not here.
    """
    if sealed is None:
        return index_words(text)
    if codec.sealer is None:
        return None
    try:
        data = codec.open_json(bytes(sealed), knowledge_where(tenant_id, record_id))
        return codec.sealer.terms(tenant_id, index_words(str(data["text"])), every_key=False)
    except KeyUnavailable:
        return None


def opened_fields(
    codec: Codec, tenant_id: str, record_id: str, text: str, source: str,
    metadata: dict[str, Any], sealed: bytes | None, subject: str | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """A row's text, source and metadata as the record holds them.

    They read ``[encrypted]`` when they are sealed and cannot be opened here.

    Args:
        codec: The codec.
        tenant_id: The row's tenant.
        record_id: The row's record id.
        text: The row's text column.
        source: The row's source column.
        metadata: The row's metadata column.
        sealed: The row's sealed fields, if sealed.
        subject: The row's data subject, whose key sealed them.
    """
    if sealed is None:
        return text, source, metadata
    try:
        data = codec.open_json(bytes(sealed), knowledge_where(tenant_id, record_id, subject))
    except KeyUnavailable:
        return ENCRYPTED, ENCRYPTED, {}
    return str(data["text"]), str(data["source"]), dict(data["metadata"])


def query_terms(codec: Codec, tenant_id: str, terms: Sequence[str]) -> list[str]:
    """What to match for the words of a query.

    The words themselves match records stored in plaintext. With a sealer, so do their blind
    terms under each of the tenant's keys.

    Args:
        codec: The codec.
        tenant_id: The tenant.
        terms: The query's words.
    """
    if codec.sealer is None:
        return list(terms)
    try:
        blind = codec.sealer.terms(tenant_id, list(terms), every_key=True)
    except KeyUnavailable:
        blind = []
    return [*terms, *blind]
