"""PostgreSQL knowledge base: a generated tsvector column with a GIN index, queried with
``websearch_to_tsquery`` and ranked with ``ts_rank``, on the store's connection pool."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..errors import StoreError
from ..store import queries
from ..store.postgres import PostgresStore
from .base import check_key, check_record
from .query import plan
from .record import KnowledgeHit, KnowledgeRecord, Sensitivity
from .sealing import opened_fields, query_terms, stored_fields

_Q = queries.load("postgres")


class PostgresKnowledge:
    """A :class:`~underway.knowledge.base.KnowledgeBase` in the tables of migration 0007,
    on the pool of ``store`` (and so in its schema). ``owns_store``: :meth:`close` closes
    the store too."""

    def __init__(self, store: PostgresStore, *, owns_store: bool = False) -> None:
        self._store = store
        self._owns_store = owns_store
        self.offload = store.offload
        """Where async code runs this knowledge base's calls: its store's I/O threads."""

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._store.pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            where = self._store.schema or "(search path)"
            raise StoreError(f"knowledge base in PostgreSQL schema {where}: {exc}") from exc

    def put(self, record: KnowledgeRecord) -> None:
        """Store ``record``, replacing the tenant's record with the same id."""
        check_record(record)
        fields = stored_fields(self._store.codec, record)
        params = {**record.model_dump(), **fields, "roles": list(record.roles),
                  "metadata": Jsonb(fields["metadata"])}
        with self._conn() as conn:
            conn.execute(_Q["knowledge_put"], params)

    def get(
        self, tenant_id: str, record_id: str, *, now: float | None = None
    ) -> KnowledgeRecord | None:
        """The tenant's record with this id, or None (also when expired at ``now``)."""
        check_key("tenant_id", tenant_id)
        check_key("record id", record_id)
        with self._conn() as conn:
            row = conn.execute(_Q["knowledge_get"], _key(tenant_id, record_id)).fetchone()
        record = self._record(row) if row is not None else None
        if record is None or (now is not None and record.expired(now)):
            return None
        return record

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
        """The tenant's readable, unexpired records matching any word of ``query``, best
        first by ts_rank."""
        s = plan(tenant_id, query, roles=roles, now=now, limit=limit,
                 max_sensitivity=max_sensitivity)
        if not s.terms:
            return []
        params = {
            # Each word quoted, joined by "or": websearch_to_tsquery then reads every word
            # as a word (even "or" and "-x"), and it never raises on any input.
            "query": " or ".join(
                f'"{t}"' for t in query_terms(self._store.codec, s.tenant_id, s.terms)),
            "tenant_id": s.tenant_id,
            "now": s.now,
            "sensitivities": list(s.sensitivities),
            "roles": list(s.roles),
            "limit": s.limit,
        }
        with self._conn() as conn:
            rows = conn.execute(_Q["knowledge_search"], params).fetchall()
        return [KnowledgeHit(self._record(r), float(r[9])) for r in rows]

    def delete(self, tenant_id: str, record_id: str) -> bool:
        """Erase the record; False when there was none."""
        check_key("tenant_id", tenant_id)
        check_key("record id", record_id)
        with self._conn() as conn:
            row = conn.execute(_Q["knowledge_delete"], _key(tenant_id, record_id)).fetchone()
        return row is not None

    def purge_expired(self, now: float) -> int:
        """Erase every record expired at ``now``; return how many."""
        with self._conn() as conn:
            return conn.execute(_Q["knowledge_purge_expired"], {"now": now}).rowcount

    def delete_subject(self, tenant_id: str, subject: str) -> int:
        """Erase the tenant's records about ``subject``; return how many."""
        check_key("tenant_id", tenant_id)
        with self._conn() as conn:
            return conn.execute(_Q["knowledge_delete_subject"],
                                {"tenant_id": tenant_id, "subject": subject}).rowcount

    def close(self) -> None:
        """Close the store when this knowledge base opened it."""
        if self._owns_store:
            self._store.close()

    def _record(self, row: tuple[Any, ...]) -> KnowledgeRecord:
        tenant_id, id_, text, source, created_at, expires_at, roles, sensitivity, metadata = \
            row[:9]
        text, source, metadata = opened_fields(self._store.codec, tenant_id, id_, text,
                                               source, metadata, row[10], row[11])
        return KnowledgeRecord(
            id=id_, tenant_id=tenant_id, text=text, source=source, created_at=created_at,
            expires_at=expires_at, roles=tuple(roles), sensitivity=sensitivity,
            metadata=metadata, subject=row[11],
        )


def _key(tenant_id: str, record_id: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "id": record_id}
