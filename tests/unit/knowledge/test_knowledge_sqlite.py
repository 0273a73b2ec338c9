"""SQLite keeps its full-text index in step with the records through every change."""

from __future__ import annotations

import sqlite3

from underway.knowledge import KnowledgeRecord, open_knowledge

T0 = 1_700_000_000.0


def test_the_full_text_index_matches_the_records_after_every_kind_of_change(
    sqlite_url: str,
) -> None:
    knowledge = open_knowledge(sqlite_url)
    for n in range(20):
        knowledge.put(KnowledgeRecord(
            id=f"r{n}", tenant_id="acme", text=f"note number {n} about parcels", source="system",
            created_at=T0, expires_at=T0 + n + 1 if n % 3 == 0 else None,
        ))
    for n in range(0, 20, 2):
        knowledge.put(KnowledgeRecord(
            id=f"r{n}", tenant_id="acme", text=f"rewritten note {n}", source="system",
            created_at=T0,
        ))
    for n in range(1, 20, 5):
        knowledge.delete("acme", f"r{n}")
    knowledge.purge_expired(T0 + 10)
    knowledge.close()

    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        # FTS5 compares every indexed word with the text of the rows it points at.
        db.execute("INSERT INTO knowledge_fts (knowledge_fts, rank) VALUES ('integrity-check', 1)")
        (rows,) = db.execute("SELECT count(*) FROM knowledge").fetchone()
    again = open_knowledge(sqlite_url)
    found = again.search("acme", "note", roles=(), now=T0, limit=100)
    assert len(found) == rows
    again.close()
