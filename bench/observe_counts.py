"""What the run counts' triggers (migration 0027) cost a step's commit: the same appends on
two databases of one kind, one with the triggers and one without them, interleaved.

Each append is one durable commit of one event that changes the run's status (ready and
waiting in turn), the case where a trigger adds a count; an append that keeps the status
(a step that goes on to the next) only tests the trigger's condition. On SQLite the figure
is the process's CPU time a commit (the database runs in the process, so the trigger's
work is in it); on PostgreSQL it is wall time, since the trigger runs in the server.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable

import psycopg

from common import Figure, median
from underway.store import AppendBatch, NewRun, RunUpdate, Store, StoredEvent, connect

ROUNDS = 30
COMMITS = 40
"""Commits a round, for each database."""
TARGET = 1.1
_STATUSES = (RunUpdate("waiting", "after", None, "go"), RunUpdate("ready", "next", 0.0))


def _event(run_id: str, seq: int) -> StoredEvent:
    digest = hashlib.sha256(f"{run_id}{seq}".encode()).hexdigest()
    return StoredEvent(seq, "StepCompleted", b'{"ok":true}', digest)


def _drop_triggers(url: str) -> None:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            for name in ("runs_counted", "runs_uncounted", "runs_recounted"):
                db.execute(f"DROP TRIGGER {name}")
        return
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        for name in ("runs_counted", "runs_uncounted", "runs_recounted"):
            conn.execute(f"DROP TRIGGER {name} ON runs")


class _Appender:
    """One leased run on one store, appended to one event a commit."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.changes = True
        """Whether each commit changes the run's status."""
        self.seq = 1
        store.create_run(NewRun(
            tenant_id="bench", run_id="r1", flow="f", idempotency_key=None,
            first_event=_event("r1", 1), blobs={}, step="start", now=1.0, next_wake_at=1.0))
        self.token = store.claim(owner="w", now=1.0, ttl=1e9, tenant_id="bench",
                                 run_id="r1")[0].token

    def commit(self) -> None:
        update = _STATUSES[self.seq % 2] if self.changes else _STATUSES[1]
        self.store.append(AppendBatch(
            tenant_id="bench", run_id="r1", expected_seq=self.seq, fence=self.token,
            events=[_event("r1", self.seq + 1)], now=2.0, update=update))
        self.seq += 1


def _per_commit(appender: _Appender, clock: Callable[[], float]) -> float:
    began = clock()
    for _ in range(COMMITS):
        appender.commit()
    return (clock() - began) / COMMITS * 1e3


def step_figures(with_url: str, without_url: str, db: str) -> list[Figure]:
    """Commit cost with the count triggers against without them (same run)."""
    clock = time.process_time if db == "sqlite" else time.perf_counter
    stores = {"with": connect(with_url), "without": connect(without_url)}
    try:
        _drop_triggers(without_url)
        samples: dict[tuple[str, bool], list[float]] = {}
        appenders = {k: _Appender(s) for k, s in stores.items()}
        for changes in (True, False):
            for a in appenders.values():
                a.changes = changes
            for i in range(ROUNDS):
                order = ("with", "without") if i % 2 else ("without", "with")
                for k in order:
                    samples.setdefault((k, changes), []).append(
                        _per_commit(appenders[k], clock))
        with stores["with"]._reads() as read:  # type: ignore[attr-defined]
            counted = read("run_counts")
        assert [(r[0], r[1], int(r[2])) for r in counted] == [("bench", "ready", 1)], counted
    finally:
        for s in stores.values():
            s.close()
    p50 = {k: median(v) for k, v in samples.items()}
    what = "CPU" if db == "sqlite" else "wall"
    return [
        Figure(f"{db}.status_commit_with_counts", p50[("with", True)], "ms",
               p50[("without", True)], p50[("with", True)] / p50[("without", True)],
               f"<= {TARGET}", p50[("with", True)] / p50[("without", True)] <= TARGET,
               note=f"{what} time of an append that changes the run's status, with the "
                    "count triggers against a database without them, interleaved"),
        Figure(f"{db}.step_commit_with_counts", p50[("with", False)], "ms",
               p50[("without", False)], p50[("with", False)] / p50[("without", False)],
               f"<= {TARGET}", p50[("with", False)] / p50[("without", False)] <= TARGET,
               note=f"{what} time of an append that keeps the status (a step that goes "
                    "on), with the triggers against without"),
    ]
