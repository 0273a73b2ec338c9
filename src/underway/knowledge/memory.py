"""In-memory knowledge base: the same rules as the databases, for tests."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Collection

from ..store._offload import INLINE, Inline
from ._query import plan
from ._record import KnowledgeHit, KnowledgeRecord, Reindexed, Sensitivity
from .base import check_key, written_record
from .words import index_words

__all__ = ["MemoryKnowledge"]


class MemoryKnowledge:
    """A :class:`~underway.knowledge.base.KnowledgeBase` held in process memory.

    A record's score counts how many distinct query words it holds, then how often. It
    does no I/O, so async code calls it inline (``offload``).
    """

    offload: Inline = INLINE

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], tuple[KnowledgeRecord, Counter[str]]] = {}

    def put(self, record: KnowledgeRecord) -> None:
        """Store ``record``, replacing the tenant's record with the same id."""
        record = written_record(record)
        entry = (record, Counter(index_words(record.text)))
        with self._lock:
            self._records[record.tenant_id, record.id] = entry

    def get(
        self, tenant_id: str, record_id: str, *, now: float | None = None
    ) -> KnowledgeRecord | None:
        """The tenant's record with this id, or None (also when expired at ``now``)."""
        check_key("tenant_id", tenant_id)
        check_key("record id", record_id)
        with self._lock:
            entry = self._records.get((tenant_id, record_id))
        if entry is None or (now is not None and entry[0].expired(now)):
            return None
        return entry[0]

    def search(
        self,
        tenant_id: str,
        query: str,
        *,
        roles: Collection[str],
        now: float,
        limit: int = 10,
        max_sensitivity: Sensitivity = "sensitive",
    ) -> list[KnowledgeHit]:
        """The tenant's readable, unexpired records matching any word of ``query``."""
        s = plan(tenant_id, query, roles=roles, now=now, limit=limit,
                 max_sensitivity=max_sensitivity)
        if not s.terms:
            return []
        with self._lock:
            entries = [e for (t, _), e in self._records.items() if t == s.tenant_id]
        hits = []
        for record, counts in entries:
            if record.expired(s.now) or record.sensitivity not in s.sensitivities:
                continue
            if record.roles and not set(record.roles) & set(s.roles):
                continue
            found = [counts[t] for t in s.terms if counts[t]]
            if found:
                # Distinct words matched first; repetitions only break ties (below 1).
                score = len(found) + 1 - 1 / (1 + sum(math.log1p(n) for n in found))
                hits.append(KnowledgeHit(record, score))
        hits.sort(key=lambda h: (-h.score, -h.record.created_at, h.record.id))
        return hits[: s.limit]

    def delete(self, tenant_id: str, record_id: str) -> bool:
        """Erase the record; False when there was none."""
        check_key("tenant_id", tenant_id)
        check_key("record id", record_id)
        with self._lock:
            return self._records.pop((tenant_id, record_id), None) is not None

    def purge_expired(self, now: float) -> int:
        """Erase every record expired at ``now``; return how many."""
        with self._lock:
            gone = [k for k, (record, _) in self._records.items() if record.expired(now)]
            for key in gone:
                del self._records[key]
        return len(gone)

    def delete_subject(self, tenant_id: str, subject: str) -> int:
        """Erase the tenant's records about ``subject``; return how many."""
        with self._lock:
            gone = [k for k, (record, _) in self._records.items()
                    if k[0] == tenant_id and record.subject == subject]
            for key in gone:
                del self._records[key]
        return len(gone)

    def reindex(self, *, tenant_id: str | None = None) -> Reindexed:
        """Count every record's words again (of ``tenant_id``, else of every tenant)."""
        if tenant_id is not None:
            check_key("tenant_id", tenant_id)
        with self._lock:
            again = {key: (record, Counter(index_words(record.text)))
                     for key, (record, _) in self._records.items()
                     if tenant_id is None or key[0] == tenant_id}
            self._records.update(again)
        return Reindexed(len(again), 0)

    def close(self) -> None:
        """Nothing to release."""
