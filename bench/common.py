"""Shared pieces of the benchmarks: figures, timing, and fresh databases.

Every benchmark gets its own database — a file in a temporary directory for SQLite, a fresh
schema for PostgreSQL — and removes it afterwards, so figures never depend on each other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure. ``ratio`` compares it with ``baseline`` measured in the same run;
    ``target`` says what the ratio (or, without a baseline, the value) should stay under."""

    name: str
    value: float
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str = ""
    ok: bool | None = None
    note: str = ""

    def record(self) -> dict[str, Any]:
        """The figure as written to ``results.json``."""
        return {"value": self.value, "unit": self.unit, "baseline": self.baseline,
                "ratio": self.ratio}


def median(values: list[float]) -> float:
    """The median, as a float."""
    return float(statistics.median(values))


def per_second(seconds_each: float) -> float:
    """A rate from a duration per item."""
    return 1.0 / seconds_each if seconds_each > 0 else float("inf")


def pg_base_url() -> str:
    """The PostgreSQL server the benchmarks use."""
    return os.environ.get("UNDERWAY_TEST_PG") or DEFAULT_PG


def pg_reachable() -> str | None:
    """None when PostgreSQL answers at :func:`pg_base_url`, else why not."""
    import psycopg

    try:
        with psycopg.connect(pg_base_url(), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {pg_base_url()} is unreachable: {exc}".strip()
    return None


def pg_store_missing() -> str | None:
    """None when underway ships a PostgreSQL store, else why the engine figures are skipped."""
    try:
        import underway.store.postgres  # noqa: F401
    except ImportError as exc:
        return f"underway.store.postgres is not available ({exc})"
    return None


@contextlib.contextmanager
def pg_schema() -> Iterator[tuple[str, str]]:
    """A fresh schema on the benchmark server: ``(schema name, store URL selecting it)``.

    Dropped with everything in it afterwards."""
    import psycopg

    base = pg_base_url()
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    try:
        yield schema, f"{base}{sep}schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextlib.contextmanager
def sqlite_dir() -> Iterator[str]:
    """A temporary directory on disk (not tmpfs when avoidable) for SQLite files."""
    root = os.environ.get("UNDERWAY_BENCH_TMP")
    path = tempfile.mkdtemp(prefix="underway-bench-", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes."""
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


class TimedStore:
    """Wraps a store and adds up the time spent in ``append`` and ``append_many`` (the
    commit path, alone or grouped); ``appends`` counts batches."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.append_seconds = 0.0
        self.appends = 0

    def append(self, batch: Any) -> bool:
        """Time the wrapped append."""
        began = time.perf_counter()
        try:
            return bool(self._inner.append(batch))
        finally:
            self.append_seconds += time.perf_counter() - began
            self.appends += 1

    def append_many(self, batches: Any) -> list[Any]:
        """Time the wrapped group append."""
        began = time.perf_counter()
        try:
            return list(self._inner.append_many(batches))
        finally:
            self.append_seconds += time.perf_counter() - began
            self.appends += len(batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
