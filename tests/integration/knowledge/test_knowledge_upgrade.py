"""Upgrading a knowledge base indexed before migration 0016, when words were split at
combining marks (`हिंदी` indexed as `ह`, `द`), on SQLite and PostgreSQL: the records stay,
plaintext ones are found by their whole words, and `reindex` (with the keys, for sealed
records) indexes every record under its words as the other backends do. Rows are written
as the code before 0016 wrote them."""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fakes.keys import encrypted
from underway.knowledge import KnowledgeBase, KnowledgeRecord, open_knowledge
from underway.knowledge.sealing import stored_fields
from underway.store import Store, connect, queries
from underway.store.postgres import PostgresStore
from underway.store.sqlite import SQLiteStore

BEFORE = 14
"""The schema version before the knowledge words changed."""
T0 = 1_700_000_000.0
KEK = b"k" * 32
RECORDS = {
    "hindi": "ग्राहक हिंदी में बात करना पसंद करते हैं",
    "hands": "खाने से पहले हाथ धोना",
    "tamil": "வாடிக்கையாளர் தமிழில் பேச விரும்புகிறார்",
    "latin": "Ananya prefers Hindi reminders",
}
SEALED = {"sealed-hindi": "सील किया हुआ हिंदी नोट"}


def old_words(text: str) -> list[str]:
    """How words were split before 0016: runs of letters and digits, marks separating."""
    return [w.lower() for w in re.findall(r"[^\W_]+", unicodedata.normalize("NFC", text))]


def record(id_: str, text: str) -> KnowledgeRecord:
    return KnowledgeRecord(id=id_, tenant_id="acme", text=text, source="system",
                           created_at=T0)


def old_row(store: Store, id_: str, text: str) -> dict[str, Any]:
    """The columns the code before 0016 stored for a record (its text, or for a sealed
    store the blind terms of its words split the old way)."""
    fields = stored_fields(store.codec, record(id_, text))
    if fields["sealed"] is not None:
        assert store.codec.sealer is not None
        fields["text"] = " ".join(store.codec.sealer.terms("acme", old_words(text),
                                                           every_key=False))
    return {"tenant_id": "acme", "id": id_, "text": fields["text"],
            "source": fields["source"], "created_at": T0, "sensitivity": "internal",
            "sealed": fields["sealed"], "metadata": json.dumps(fields["metadata"])}


def found(kb: KnowledgeBase, query: str) -> set[str]:
    return {h.record.id for h in kb.search("acme", query, roles=(), now=T0 + 1, limit=50)}


def check_upgraded(url: str) -> None:
    """Searches after the upgrade, then reindexing without keys, then with them."""
    store = connect(url)  # migrates to the newest schema
    try:
        kb = open_knowledge(store)
        # Plaintext records keep working (on SQLite the index was rebuilt with the marks
        # inside words; on PostgreSQL the C locale's parser had kept them).
        assert found(kb, "हिंदी") == {"hindi"}
        assert found(kb, "தமிழில்") == {"tamil"}
        assert found(kb, "hindi") == {"latin"}
        # Without the keys a sealed record cannot be split anew: it is counted, left alone.
        done = kb.reindex()
        assert (done.records, done.sealed_without_keys) == (len(RECORDS), 1)
        assert found(kb, "हिंदी") == {"hindi"}
        assert found(kb, "ह") == set()
    finally:
        store.close()
    store = connect(url)
    try:
        encrypted(store, KEK)
        kb = open_knowledge(store)
        # The sealed record was indexed under the blind terms of `ह`, `द`...
        assert found(kb, "हिंदी") == {"hindi"}
        assert found(kb, "ह") == {"sealed-hindi"}
        done = kb.reindex(tenant_id="acme")
        assert (done.records, done.sealed_without_keys) == (len(RECORDS) + 1, 0)
        # ...and now under those of its words, as every backend finds it.
        assert found(kb, "हिंदी") == {"hindi", "sealed-hindi"}
        assert found(kb, "ह") == set()
        assert found(kb, "नोट") == {"sealed-hindi"}
        assert kb.reindex().records == len(RECORDS) + 1  # again: nothing changes
        assert found(kb, "हिंदी") == {"hindi", "sealed-hindi"}
    finally:
        store.close()


def test_sqlite_knowledge_indexed_before_0016_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "underway.db"
    with closing(sqlite3.connect(path)) as db:
        sqlite_q = queries.load("sqlite")
        db.execute(sqlite_q["schema_version_table"])
        for version, name, text in queries.migrations("sqlite"):
            if version <= BEFORE:
                db.executescript(text)
                db.execute(sqlite_q["record_migration"], (version, name, T0))
        db.commit()
    plain = SQLiteStore(str(path))
    sealed = SQLiteStore(str(path))
    encrypted(sealed, KEK)
    rows = [old_row(plain, i, t) for i, t in RECORDS.items()]
    rows += [old_row(sealed, i, t) for i, t in SEALED.items()]
    sealed.close()
    plain.close()
    with closing(sqlite3.connect(path)) as db:
        for row in rows:
            (seq,) = db.execute(
                "INSERT INTO knowledge (tenant_id, id, text, source, created_at, sensitivity, "
                "metadata, sealed) VALUES (:tenant_id, :id, :text, :source, :created_at, "
                ":sensitivity, :metadata, :sealed) RETURNING seq", row).fetchone()
            db.execute("INSERT INTO knowledge_fts (rowid, text) VALUES (?, ?)",
                       (seq, row["text"]))
        db.commit()

    check_upgraded(f"sqlite:///{path}")
    with closing(sqlite3.connect(path)) as db:
        # FTS5 compares every indexed word with the terms of the rows it points at.
        db.execute("INSERT INTO knowledge_fts (knowledge_fts, rank) VALUES ('integrity-check', 1)")


@pytest.mark.postgres
def test_postgres_knowledge_indexed_before_0016_upgrades(pg_url: str) -> None:
    old = PostgresStore(pg_url)
    try:
        assert old.migrate(target=BEFORE) == BEFORE
        rows = [old_row(old, i, t) for i, t in RECORDS.items()]
        encrypted(old, KEK)
        rows += [old_row(old, i, t) for i, t in SEALED.items()]
        with old.pool.connection() as conn:
            for row in rows:
                # tsv was a column PostgreSQL generated from the text.
                conn.execute(
                    "INSERT INTO knowledge (tenant_id, id, text, source, created_at, "
                    "sensitivity, metadata, sealed) VALUES (%(tenant_id)s, %(id)s, %(text)s, "
                    "%(source)s, %(created_at)s, %(sensitivity)s, %(metadata)s, %(sealed)s)",
                    row)
    finally:
        old.close()
    check_upgraded(pg_url)
    with psycopg.connect(pg_url.split("?")[0]) as conn:
        schema = pg_url.split("schema=")[1]
        (generated,) = conn.execute(
            "SELECT attgenerated FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relname = 'knowledge' AND a.attname = 'tsv'", (schema,)).fetchone()
        assert generated == ""  # written by the code from its words, not by the parser
