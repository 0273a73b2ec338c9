"""Knowledge records at rest when their store seals payloads (``underway.crypto``).

A record's text, source and metadata are sealed together into the row's ``sealed`` column,
bound to its tenant and id; its ``text`` column holds *blind index terms* instead of words:
a keyed hash of each word under the tenant's key, so the full-text index (FTS5, tsvector)
still finds and ranks records by the words of a query — blinded the same way — while
holding no word of the text. What leaks is what any keyed index leaks: which records share
a word, and how often. Without a sealer, records are stored as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import ENCRYPTED, Codec, knowledge_where
from ..errors import KeyUnavailable
from ..events import canonical_json
from .query import words
from .record import KnowledgeRecord


def stored_fields(codec: Codec, record: KnowledgeRecord) -> dict[str, Any]:
    """The ``text``, ``source``, ``metadata`` and ``sealed`` columns of ``record``."""
    if codec.sealer is None:
        return {"text": record.text, "source": record.source, "metadata": record.metadata,
                "sealed": None}
    terms = codec.sealer.terms(record.tenant_id, words(record.text), every_key=False)
    sealed = codec.seal(
        canonical_json({"text": record.text, "source": record.source,
                        "metadata": record.metadata}),
        knowledge_where(record.tenant_id, record.id, record.subject),
    )
    return {"text": " ".join(terms), "source": ENCRYPTED, "metadata": {}, "sealed": sealed}


def opened_fields(
    codec: Codec, tenant_id: str, record_id: str, text: str, source: str,
    metadata: dict[str, Any], sealed: bytes | None, subject: str | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """A row's text, source and metadata as the record holds them (``[encrypted]`` when
    they are sealed and cannot be opened here)."""
    if sealed is None:
        return text, source, metadata
    try:
        data = codec.open_json(bytes(sealed), knowledge_where(tenant_id, record_id, subject))
    except KeyUnavailable:
        return ENCRYPTED, ENCRYPTED, {}
    return str(data["text"]), str(data["source"]), dict(data["metadata"])


def query_terms(codec: Codec, tenant_id: str, terms: Sequence[str]) -> list[str]:
    """What to match for the words ``terms`` of a query: the words themselves (records
    stored in plaintext) and, with a sealer, their blind terms under each of the tenant's
    keys."""
    if codec.sealer is None:
        return list(terms)
    try:
        blind = codec.sealer.terms(tenant_id, list(terms), every_key=True)
    except KeyUnavailable:
        blind = []
    return [*terms, *blind]
