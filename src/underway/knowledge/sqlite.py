"""SQLite knowledge base: an FTS5 index ranked with bm25, in the store's own file.

The index is over each row's ``terms``: the words :mod:`underway.knowledge.words` split its
text into (or their blind terms), space-separated, which FTS5's tokenizer (marks, letters
and digits as token characters) keeps whole."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import StoreError
from ..store import queries
from ..store.sqlite import SQLiteStore
from ._query import plan
from ._record import KnowledgeHit, KnowledgeRecord, Reindexed, Sensitivity
from .base import check_key, written_record
from .sealing import opened_fields, query_terms, row_terms, stored_fields

__all__ = ["SQLiteKnowledge"]

_Q = queries.load("sqlite")
_BATCH = 200
"""Rows a reindex reads, and writes in one transaction, at a time."""


class SQLiteKnowledge:
    """A :class:`~underway.knowledge.base.KnowledgeBase` in the tables of migrations 0007
    and 0016, on the connection of ``store``. ``owns_store``: :meth:`close` closes the store too."""

    def __init__(self, store: SQLiteStore, *, owns_store: bool = False) -> None:
        self._store = store
        self._owns_store = owns_store
        self.offload = store.offload
        """Where async code runs this knowledge base's calls: its store's I/O threads."""

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._store.connection() as c, _failures(self._store.path):
            yield c

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._read() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def put(self, record: KnowledgeRecord) -> None:
        """Store ``record``, replacing the tenant's record with the same id."""
        record = written_record(record)
        row = _row(record, stored_fields(self._store.codec, record))
        with self._write() as c:
            old = c.execute(_Q["knowledge_get"], _key(record.tenant_id, record.id)).fetchone()
            if old is not None:
                c.execute(_Q["knowledge_unindex"], {"seq": old["seq"], "terms": old["terms"]})
            (seq,) = c.execute(_Q["knowledge_upsert"], row).fetchone()
            c.execute(_Q["knowledge_index"], {"seq": seq, "terms": row["terms"]})

    def get(
        self, tenant_id: str, record_id: str, *, now: float | None = None
    ) -> KnowledgeRecord | None:
        """The tenant's record with this id, or None (also when expired at ``now``)."""
        check_key("tenant_id", tenant_id)
        check_key("record id", record_id)
        with self._read() as c:
            row = c.execute(_Q["knowledge_get"], _key(tenant_id, record_id)).fetchone()
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

        Best first, by bm25.
        """
        s = plan(tenant_id, query, roles=roles, now=now, limit=limit,
                 max_sensitivity=max_sensitivity)
        if not s.terms:
            return []
        params = {
            # Each word becomes a quoted FTS5 string, so operators (AND, OR, NEAR), column
            # filters and wildcards in the query are plain words, never syntax.
            "match": " OR ".join('"' + t.replace('"', '""') + '"' for t in
                                 query_terms(self._store.codec, s.tenant_id, s.terms)),
            "tenant_id": s.tenant_id,
            "now": s.now,
            "sensitivities": json.dumps(s.sensitivities),
            "roles": json.dumps(s.roles),
            "limit": s.limit,
        }
        with self._read() as c:
            rows = c.execute(_Q["knowledge_search"], params).fetchall()
        return [KnowledgeHit(self._record(r), float(r["score"])) for r in rows]

    def delete(self, tenant_id: str, record_id: str) -> bool:
        """Erase the record and its words from the index; False when there was none."""
        check_key("tenant_id", tenant_id)
        check_key("record id", record_id)
        with self._write() as c:
            old = c.execute(_Q["knowledge_get"], _key(tenant_id, record_id)).fetchone()
            if old is None:
                return False
            c.execute(_Q["knowledge_unindex"], {"seq": old["seq"], "terms": old["terms"]})
            c.execute(_Q["knowledge_delete"], {"seq": old["seq"]})
        return True

    def purge_expired(self, now: float) -> int:
        """Erase every record expired at ``now``; return how many."""
        with self._write() as c:
            c.execute(_Q["knowledge_unindex_expired"], {"now": now})
            return c.execute(_Q["knowledge_purge_expired"], {"now": now}).rowcount

    def delete_subject(self, tenant_id: str, subject: str) -> int:
        """Erase the tenant's records about ``subject`` and their words; return how many."""
        check_key("tenant_id", tenant_id)
        params = {"tenant_id": tenant_id, "subject": subject}
        with self._write() as c:
            c.execute(_Q["knowledge_unindex_subject"], params)
            return c.execute(_Q["knowledge_delete_subject"], params).rowcount

    def reindex(self, *, tenant_id: str | None = None) -> Reindexed:
        """Index every record (of ``tenant_id``, else of every tenant) again under the
        words this version splits its text into; see
        :meth:`~underway.knowledge.base.KnowledgeBase.reindex`."""
        if tenant_id is not None:
            check_key("tenant_id", tenant_id)
        done = without_keys = 0
        after = 0
        while True:
            with self._read() as c:
                rows = c.execute(_Q["knowledge_batch"], {
                    "after": after, "tenant_id": tenant_id, "limit": _BATCH}).fetchall()
            if not rows:
                return Reindexed(done, without_keys)
            after = rows[-1]["seq"]
            # Opening sealed rows may read keys through the store: never inside the
            # connection's transaction.
            fresh: dict[int, tuple[str, bytes | None, str]] = {}
            for r in rows:
                split = row_terms(self._store.codec, r["tenant_id"], r["id"], r["text"],
                                  r["sealed"])
                if split is None:
                    without_keys += 1
                else:
                    fresh[r["seq"]] = (r["text"], r["sealed"], " ".join(split))
            with self._write() as c:
                for seq, (text, sealed, terms) in fresh.items():
                    now = c.execute(_Q["knowledge_row_at"], {"seq": seq}).fetchone()
                    if now is None or (now["text"], now["sealed"]) != (text, sealed):
                        continue  # deleted or rewritten (and so indexed) meanwhile
                    if now["terms"] != terms:
                        c.execute(_Q["knowledge_unindex"], {"seq": seq, "terms": now["terms"]})
                        c.execute(_Q["knowledge_set_terms"], {"seq": seq, "terms": terms})
                        c.execute(_Q["knowledge_index"], {"seq": seq, "terms": terms})
                    done += 1

    def close(self) -> None:
        """Close the store when this knowledge base opened it."""
        if self._owns_store:
            self._store.close()

    def _record(self, row: sqlite3.Row) -> KnowledgeRecord:
        text, source, metadata = opened_fields(
            self._store.codec, row["tenant_id"], row["id"], row["text"], row["source"],
            json.loads(row["metadata"]), row["sealed"], row["subject"],
        )
        return KnowledgeRecord(
            id=row["id"], tenant_id=row["tenant_id"], text=text, source=source,
            created_at=row["created_at"], expires_at=row["expires_at"],
            roles=tuple(json.loads(row["roles"])), sensitivity=row["sensitivity"],
            metadata=metadata, subject=row["subject"],
        )


@contextmanager
def _failures(path: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"knowledge base in SQLite file {path}: {exc}") from exc


def _key(tenant_id: str, record_id: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "id": record_id}


def _row(r: KnowledgeRecord, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "tenant_id": r.tenant_id, "id": r.id, "text": fields["text"],
        "source": fields["source"], "created_at": r.created_at, "expires_at": r.expires_at,
        "roles": json.dumps(r.roles), "sensitivity": r.sensitivity,
        "metadata": json.dumps(fields["metadata"], ensure_ascii=False),
        "sealed": fields["sealed"], "terms": " ".join(fields["terms"]),
        "subject": r.subject,
    }
