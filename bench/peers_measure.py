"""What ``peers.py`` reads off the databases around each shape: bytes stored, commits, and
the ``fsync``s a process makes.

* SQLite: the pages in use (``page_count - freelist_count``, times the page size) as a
  reader sees them, the write-ahead log included;
* PostgreSQL: the bytes of every table of the database, with its indexes and TOAST, and —
  from the write-ahead log itself, read with ``pg_walinspect`` between two positions — the
  write transactions that touched the database's relations and the WAL bytes they wrote.
  Reading the log per database keeps the other databases of a shared server out of it;
* a server with storage of its own (Restate): the bytes of the files in its data directory;
* any process: its ``fsync`` and ``fdatasync`` calls, counted by ``strace -c`` attached to
  every thread while one command runs (``strace`` slows what it watches, so that pass is
  never timed).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg

SYNC_CALLS = ("fsync", "fdatasync")


def sqlite_bytes(path: str) -> int:
    """Bytes of the pages a SQLite file keeps in use, as a reader sees them (WAL included)."""
    if not os.path.exists(path):
        return 0
    conn = sqlite3.connect(path)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return int((pages - free) * size)


def sqlite_journal_mode(path: str) -> str:
    """The journal mode a library left its SQLite file in (``wal`` persists; the rollback
    modes read back as ``delete``)."""
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def tree_bytes(root: str) -> int:
    """Bytes of the files under ``root`` (their sizes, not the blocks allocated for them)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_size
    return total


def database_url(base: str, dbname: str) -> str:
    """``base`` (a ``postgresql://`` URL) naming database ``dbname`` instead."""
    parts = urlsplit(base)
    if parts.scheme not in ("postgresql", "postgres"):
        raise SystemExit(f"UNDERWAY_TEST_PG must be a postgresql:// URL, not {base!r}")
    return urlunsplit((parts.scheme, parts.netloc, f"/{dbname}", parts.query, parts.fragment))


@dataclass(frozen=True)
class WalWork:
    """What the write-ahead log holds of one database between two positions."""

    commits: int
    """Transactions with a write to one of the database's relations."""
    wal_bytes: int
    """Bytes of their records (full-page images and commit records included)."""


class PostgresWatch:
    """Fresh databases on the benchmark server, and what the log says was written to them.

    ``pg_walinspect`` lives in a database of its own, created and dropped with the rest."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.created: list[str] = []
        self.observer = self.create("observe")
        self._obs = psycopg.connect(database_url(base, self.observer), autocommit=True)
        self.no_walinspect: str | None = None
        """Why commits cannot be counted from the log here, when they cannot."""
        try:
            self._obs.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error as exc:
            self.no_walinspect = f"pg_walinspect is not available: {exc}".strip()

    def create(self, label: str) -> str:
        """A new empty database; its name."""
        name = f"peers_{label}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return name

    def oid(self, name: str) -> int:
        """The database's OID, as WAL block references name it."""
        row = self._obs.execute("SELECT oid FROM pg_database WHERE datname = %s",
                                (name,)).fetchone()
        if row is None:
            raise RuntimeError(f"no database {name}")
        return int(row[0])

    def position(self) -> str:
        """The log's insert position now."""
        row = self._obs.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        return str(row[0]) if row else "0/0"

    def table_bytes(self, name: str) -> int:
        """Bytes of the database's tables, their indexes and TOAST (catalogs left out)."""
        with psycopg.connect(database_url(self.base, name)) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'm') "
                "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
                "AND n.nspname NOT LIKE 'pg_toast%'").fetchone()
        return int(row[0]) if row else 0

    def work(self, oid: int, start: str, end: str) -> WalWork | None:
        """Write transactions on database ``oid`` between log positions ``start`` and ``end``
        (waits for the log to be flushed past ``end``, which ``pg_walinspect`` needs);
        None without ``pg_walinspect``."""
        if self.no_walinspect:
            return None
        for _ in range(200):
            row = self._obs.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn",
                                    (end,)).fetchone()
            if row and row[0]:
                break
            time.sleep(0.05)
        rel = f"%rel 1663/{oid}/%"
        row = self._obs.execute(
            "WITH r AS (SELECT xid, record_length, block_ref "
            "           FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)), "
            "x AS (SELECT DISTINCT xid FROM r WHERE xid::text <> '0' AND block_ref LIKE %s) "
            "SELECT (SELECT count(*) FROM x), "
            "       (SELECT coalesce(sum(record_length), 0) FROM r "
            "        WHERE xid::text IN (SELECT xid::text FROM x))",
            (start, end, rel)).fetchone()
        return WalWork(int(row[0]), int(row[1])) if row else WalWork(0, 0)

    def close(self) -> None:
        """Drop every database made here."""
        self._obs.close()
        with psycopg.connect(self.base, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def strace_missing() -> str | None:
    """None when ``strace`` can attach to a process here, else why not."""
    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.run(["strace", "-f", "-c", "-o", os.devnull, "true"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[-300:]}"
    return None


@contextlib.contextmanager
def counting_syncs(pids: list[int]) -> Iterator[dict[str, int]]:
    """Counts the ``fsync``/``fdatasync`` calls of every thread of ``pids`` (and of threads
    they start) while the block runs; the dict is filled when it ends."""
    with tempfile.NamedTemporaryFile(prefix="peers-strace-", delete=False) as out:
        pass
    args = ["strace", "-f", "-c", "-e", "trace=" + ",".join(SYNC_CALLS), "-o", out.name]
    for pid in pids:
        args += ["-p", str(pid)]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    attached: set[int] = set()
    # strace says "Process N attached" (with its threads) once it traces each process.
    while len(attached) < len(pids):
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"strace ended before attaching to {pids}")
        if (m := re.search(r"Process (\d+) attached", line)) and int(m.group(1)) in pids:
            attached.add(int(m.group(1)))
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        with open(out.name, encoding="utf-8") as f:
            counts.update(_summary(f.read()))
        os.unlink(out.name)


def _summary(text: str) -> dict[str, int]:
    counts = {name: 0 for name in SYNC_CALLS}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[-1] in counts:
            counts[cols[-1]] = int(cols[3])
    return counts
