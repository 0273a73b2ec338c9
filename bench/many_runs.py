"""Fill a database with many runs quickly, by SQL, in the shapes the store writes.

A million runs through the engine would take hours here; one ``INSERT … SELECT`` a table
takes a minute. :func:`fill` writes the runs rows of a :class:`Mix` (completed runs, runs
waiting on timers, ready runs, runs in flight) and, for each run, the journal event its
row points at (the head: ``last_seq`` and ``last_hash``), so the worker's row check finds
a completed run's ``RunCompleted`` where it looks. The rows are those the store writes for
a run of :data:`FLOW` (``bench/workers.py``'s timer flow): the step, sequence numbers,
lease tokens and wake times of a completed run (8 events), a run asleep on its timer (4)
and a run started but not yet claimed (1). Then the planner's statistics are gathered, as
autovacuum does soon after a bulk insert.

The rows carry no whole journal: a worker must never activate them. Ready rows are for
claims measured without running them; runs a worker drives are started by the engine.

Used by ``bench/million.py`` and ``tests/integration/test_million_plans.py``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

FLOW = "bench_timer"
TENANTS = 8
"""Tenants the runs are spread over. Claims walk every (queue, tenant) with scheduled runs,
so their cost follows this number, never the number of runs."""
IN_FLIGHT = 50
"""Runs leased by a live worker, whatever the size: workers' slots, not the table, set it."""


@dataclass(frozen=True)
class Mix:
    """How many runs of each kind: the rest of ``runs`` are completed.

    ``now`` is the instant the rows are shaped around: ready runs were due before it, timers
    are due after it (from ``timers_from`` seconds on, one every ``timer_every`` seconds, in
    run order spread across tenants)."""

    runs: int
    waiting: int
    ready: int
    now: float
    in_flight: int = IN_FLIGHT
    tenants: int = TENANTS
    timers_from: float = 3600.0
    timer_every: float = 1.0

    @classmethod
    def scaled(cls, runs: int, *, now: float) -> Mix:
        """The issue's mix at any size: a tenth waiting on timers, a hundredth ready (a
        million runs: 100,000 waiting, 10,000 ready, the rest completed)."""
        return cls(runs=runs, waiting=runs // 10, ready=runs // 100, now=now)

    @property
    def completed(self) -> int:
        """Runs that are finished."""
        return self.runs - self.waiting - self.ready - self.in_flight


# Run i's kind by its place: the first `ready` are ready, the next `in_flight` are leased,
# the next `waiting` wait on timers, the rest completed. Tenants take turns (i % tenants),
# and every run was created one millisecond after the one before, ending at now - 60 s.
_KIND = ("CASE WHEN i < :ready THEN 'ready' WHEN i < :ready + :flying THEN 'flying' "
         "WHEN i < :ready + :flying + :waiting THEN 'waiting' ELSE 'completed' END")
_COLUMNS = """
    tenant_id, run_id, flow, status, step, last_seq, last_hash, next_wake_at, lease_owner,
    lease_token, lease_expires_at, created_at, updated_at, queue, purpose"""
_ROW = """
    'tenant-' || (i %% :tenants), 'run-' || i, :flow,
    CASE kind WHEN 'completed' THEN 'completed' WHEN 'waiting' THEN 'waiting' ELSE 'ready' END,
    CASE kind WHEN 'completed' THEN NULL WHEN 'waiting' THEN 'woke_by_timer'
              ELSE 'arm_timer' END,
    CASE kind WHEN 'completed' THEN 8 WHEN 'waiting' THEN 4 ELSE 1 END,
    :hash,
    CASE kind WHEN 'completed' THEN NULL
              WHEN 'waiting' THEN :now + :timers_from + (i - :ready - :flying) * :timer_every
              ELSE :now - 60 - (:runs - i) * 0.001 END,
    CASE kind WHEN 'flying' THEN 'bench-worker' END,
    CASE kind WHEN 'completed' THEN 2 WHEN 'waiting' THEN 1 WHEN 'flying' THEN 1 ELSE 0 END,
    CASE kind WHEN 'flying' THEN :now + 300 END,
    :now - 60 - (:runs - i) * 0.001,
    :now - 60 - (:runs - i) * 0.001 + CASE kind WHEN 'ready' THEN 0 ELSE 0.02 END,
    'default', 'operations'"""
_HEAD = """
    CASE kind WHEN 'completed' THEN 8 WHEN 'waiting' THEN 4 ELSE 1 END,
    CASE kind WHEN 'completed' THEN 'RunCompleted' WHEN 'waiting' THEN 'TimerSet'
              ELSE 'RunStarted' END"""

_PG_RUNS = f"""
INSERT INTO runs ({_COLUMNS})
SELECT {_ROW}
  FROM (SELECT i, {_KIND} AS kind FROM generate_series(0, :runs - 1) AS i) AS n"""
_PG_EVENTS = f"""
INSERT INTO events (tenant_id, run_id, seq, type, payload, hash)
SELECT 'tenant-' || (i %% :tenants), 'run-' || i, {_HEAD}, '\\x7b7d'::bytea,
       sha256(int8send(i))
  FROM (SELECT i, {_KIND} AS kind FROM generate_series(0, :runs - 1) AS i) AS n"""

_SQLITE_SERIES = ("WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s "
                  "WHERE i + 1 < :runs), n AS (SELECT i, {kind} AS kind FROM s)")
_SQLITE_RUNS = (_SQLITE_SERIES.format(kind=_KIND)
                + f" INSERT INTO runs ({_COLUMNS}) SELECT {_ROW.replace('%%', '%')} FROM n")
_SQLITE_EVENTS = (_SQLITE_SERIES.format(kind=_KIND)
                  + " INSERT INTO events (tenant_id, run_id, seq, type, payload, hash) "
                  + "SELECT 'tenant-' || (i % :tenants), 'run-' || i, "
                  + _HEAD + ", x'7b7d', randomblob(32) FROM n")


def _params(mix: Mix) -> dict[str, object]:
    return {"runs": mix.runs, "ready": mix.ready, "flying": mix.in_flight,
            "waiting": mix.waiting, "tenants": mix.tenants, "flow": FLOW, "now": mix.now,
            "timers_from": mix.timers_from, "timer_every": mix.timer_every, "hash": "0" * 64}


def _pg(sql: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s``."""
    import re

    return re.sub(r"(?<![:\w]):([a-z_]+)", r"%(\1)s", sql)


def fill(url: str, mix: Mix) -> None:
    """Write ``mix``'s runs (and each one's head event) into the migrated, empty database
    at ``url`` (a store URL: ``sqlite:///…`` or PostgreSQL with ``?schema=``), then gather
    the planner's statistics."""
    if mix.completed < 0:
        raise ValueError(f"a mix of {mix.runs} runs cannot hold the kinds asked: {mix}")
    params = _params(mix)
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(_SQLITE_RUNS, params)
            conn.execute(_SQLITE_EVENTS, params)
            conn.execute("ANALYZE")
        return
    import psycopg

    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(_pg(_PG_RUNS).encode(), params)
        conn.execute(_pg(_PG_EVENTS).encode(), params)
        conn.execute("VACUUM ANALYZE runs")
        conn.execute("VACUUM ANALYZE events")
