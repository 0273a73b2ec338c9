"""PostgreSQL knowledge base: a tsvector column with a GIN index, ranked with ``ts_rank``,
on the store's connection pool.

PostgreSQL's text parser never sees a record or a query: the tsvector is written, and the
tsquery read, in their own syntax from the words :mod:`underway.knowledge.words` split the
text into (or their blind terms), so what is indexed does not depend on the server's locale
and matches what the other backends index."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..errors import StoreError
from ..store import queries
from ..store.postgres import PostgresStore
from ._query import plan
from ._record import KnowledgeHit, KnowledgeRecord, Reindexed, Sensitivity
from .base import check_key, written_record
from .sealing import opened_fields, query_terms, row_terms, stored_fields

__all__ = ["PostgresKnowledge"]

_Q = queries.load("postgres")
_BATCH = 200
"""Rows a reindex reads, and writes in one transaction, at a time."""
_MAX_POSITION = 16383
"""tsvector's largest position (a larger one is stored as this)."""
_MAX_POSITIONS = 256
"""tsvector's most positions per lexeme (the rest are dropped)."""


class PostgresKnowledge:
    """A :class:`~underway.knowledge.base.KnowledgeBase` in the tables of migrations 0007
    and 0016, on the pool of ``store`` (and so in its schema). ``owns_store``: :meth:`close` closes
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
        record = written_record(record)
        fields = stored_fields(self._store.codec, record)
        params = {**record.model_dump(), **fields, "roles": list(record.roles),
                  "metadata": Jsonb(fields["metadata"]), "tsv": tsvector(fields["terms"])}
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
        """The tenant's readable, unexpired records matching any word of ``query``.

        Best first, by ts_rank.
        """
        s = plan(tenant_id, query, roles=roles, now=now, limit=limit,
                 max_sensitivity=max_sensitivity)
        if not s.terms:
            return []
        params = {
            # Each word a quoted lexeme, joined by "|": no word is read as an operator, and
            # none is split or normalised again.
            "query": " | ".join(
                _lexeme(t) for t in query_terms(self._store.codec, s.tenant_id, s.terms)),
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

    def reindex(self, *, tenant_id: str | None = None) -> Reindexed:
        """Index every record (of ``tenant_id``, else of every tenant) again under the
        words this version splits its text into; see
        :meth:`~underway.knowledge.base.KnowledgeBase.reindex`."""
        if tenant_id is not None:
            check_key("tenant_id", tenant_id)
        done = without_keys = 0
        after = ("", "")
        while True:
            with self._conn() as conn:
                rows = conn.execute(_Q["knowledge_batch"], {
                    "after_tenant": after[0], "after_id": after[1], "tenant_id": tenant_id,
                    "limit": _BATCH}).fetchall()
            if not rows:
                return Reindexed(done, without_keys)
            after = (rows[-1][0], rows[-1][1])
            updates = []
            for tenant, id_, text, sealed in rows:
                terms = row_terms(self._store.codec, tenant, id_, text, sealed)
                if terms is None:
                    without_keys += 1
                else:
                    updates.append({"tenant_id": tenant, "id": id_, "text": text,
                                    "sealed": sealed, "tsv": tsvector(terms)})
            with self._conn() as conn, conn.transaction():
                for update in updates:
                    done += conn.execute(_Q["knowledge_set_tsv"], update).rowcount

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


def _lexeme(term: str) -> str:
    """``term`` quoted as one lexeme of tsvector and tsquery syntax."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector(terms: list[str]) -> str:
    """The tsvector, in PostgreSQL's own syntax, of a text whose words are ``terms`` in
    order: each term once, with the positions it occurs at (as ``to_tsvector`` gives them:
    from 1, at most 256 per term, the last ones beyond 16383 stored as 16383)."""
    positions: dict[str, list[int]] = {}
    for n, term in enumerate(terms, start=1):
        at = positions.setdefault(term, [])
        if len(at) < _MAX_POSITIONS and (not at or at[-1] < _MAX_POSITION):
            at.append(min(n, _MAX_POSITION))
    return " ".join(f"{_lexeme(t)}:{','.join(map(str, at))}" for t, at in positions.items())
