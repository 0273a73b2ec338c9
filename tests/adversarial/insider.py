"""An insider with write access to the database: plain SQL behind the store's back, on
SQLite or PostgreSQL (``?`` placeholders on both)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from underway.events import genesis_hash, link_hash
from underway.store.postgres import split_url


class Insider:
    """Direct SQL on one database."""

    def __init__(self, conn: sqlite3.Connection | psycopg.Connection[Any], schema: str | None):
        self._conn = conn
        self.schema = schema

    def q(self, text: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (empty when it returns none)."""
        if isinstance(self._conn, sqlite3.Connection):
            return self._conn.execute(text, params).fetchall()
        cur = self._conn.execute(text.replace("?", "%s"), params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []

    def events(self, tenant: str, run: str) -> list[tuple[int, str, bytes, str]]:
        """(seq, type, payload, hash) of every event of the run, in order."""
        rows = self.q("SELECT seq, type, payload, hash FROM events "
                      "WHERE tenant_id = ? AND run_id = ? ORDER BY seq", tenant, run)
        return [(int(s), str(t), bytes(p), bytes(h).hex()) for s, t, p, h in rows]

    def set_payload(self, tenant: str, run: str, seq: int, payload: bytes) -> None:
        """Overwrite an event's stored bytes and nothing else."""
        self.q("UPDATE events SET payload = ? WHERE tenant_id = ? AND run_id = ? AND seq = ?",
               payload, tenant, run, seq)

    def rehash(self, tenant: str, run: str) -> None:
        """Recompute the whole chain with the public hash function, and point the run row
        at the new hash of the seq it records: what an insider does to hide an edit."""
        prev = genesis_hash(tenant, run)
        new: dict[int, str] = {}
        for seq, kind, payload, _ in self.events(tenant, run):
            prev = new[seq] = link_hash(prev, seq, kind, payload)
            self.q("UPDATE events SET hash = ? WHERE tenant_id = ? AND run_id = ? AND seq = ?",
                   bytes.fromhex(prev), tenant, run, seq)
        rows = self.q("SELECT last_seq FROM runs WHERE tenant_id = ? AND run_id = ?",
                      tenant, run)
        if rows and rows[0][0] in new:
            self.q("UPDATE runs SET last_hash = ? WHERE tenant_id = ? AND run_id = ?",
                   new[rows[0][0]], tenant, run)

    def truncate(self, tenant: str, run: str, keep: int) -> None:
        """Delete every event after ``keep`` and rewrite the row to end there."""
        self.q("DELETE FROM events WHERE tenant_id = ? AND run_id = ? AND seq > ?",
               tenant, run, keep)
        (head,), = self.q("SELECT hash FROM events WHERE tenant_id = ? AND run_id = ? "
                          "AND seq = ?", tenant, run, keep)
        self.q("UPDATE runs SET last_seq = ?, last_hash = ? WHERE tenant_id = ? AND run_id = ?",
               keep, bytes(head).hex(), tenant, run)

    def delete_run(self, tenant: str, run: str) -> None:
        """Every trace of the run: events, row, checkpoint."""
        for table in ("events", "runs", "checkpoints"):
            self.q(f"DELETE FROM {table} WHERE tenant_id = ? AND run_id = ?", tenant, run)

    def dump(self) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """Every table with all its rows, sorted: equal dumps mean nothing was written."""
        if isinstance(self._conn, sqlite3.Connection):
            names = [r[0] for r in self.q(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            schema = [r for r in self.q("SELECT type, name, sql FROM sqlite_master "
                                        "ORDER BY type, name")]
        else:
            names = [r[0] for r in self.q(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() ORDER BY table_name")]
            schema = self.q(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() ORDER BY 1, 2")
        out = [("(schema)", [tuple(map(repr, r)) for r in schema])]
        for name in names:
            rows = self.q(f'SELECT * FROM "{name}"')
            out.append((name, sorted(tuple(map(repr, r)) for r in rows)))
        return out


@contextmanager
def insider(url: str) -> Iterator[Insider]:
    """Direct SQL on the database of ``url`` (autocommit)."""
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            yield Insider(conn, None)
        finally:
            conn.close()
        return
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as pg:
        if schema:
            pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        yield Insider(pg, schema)
