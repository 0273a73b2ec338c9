"""Chaos with real ``underway worker`` processes on SQLite and PostgreSQL.

Several workers share one database and drive a few hundred runs of the chaos app
(:mod:`app`: a read-only call, a non-idempotent call with a reconcile hook, an idempotent
call, a durable sleep and a ``goto`` loop) while the test SIGKILLs random workers (and
starts replacements) and SIGSTOPs others past their leases, until other workers have
taken their runs over, before SIGCONTing them. Then:

- every run completed with the result its effects imply;
- every journal is contiguous, verifies, and still holds, byte for byte, whatever any
  earlier snapshot saw;
- the outside service saw each non-idempotent effect at most once per key (idempotent
  re-deliveries are counted, not failed). The service checks the lease token each
  request carries (:mod:`fakes.outside_service`): a frozen worker may wake with a request
  still to send after the run's new holder reconciled "not happened" and sent it, and only
  the outside system can refuse that late request (``stale_effects_refused`` counts how
  often it did);
- no two workers ever held a valid lease on one run at once: the lease tokens recorded in
  a journal never go backwards, and nothing was committed under a lease once a newer one
  had been seen at work on the run; the runs a frozen worker held were taken over, and
  once thawed it gave up those it had a step in flight on (its writes were refused) and
  said so;
- every timer set fired exactly once, across all workers.

The same holds when PostgreSQL itself is restarted mid-load, on a throwaway cluster the
test creates, and when the workers reach PostgreSQL through PgBouncer in transaction mode
(LISTEN on the server itself, ``listen_url``). ``UNDERWAY_CRASH_KILLS`` (``make soak``:
10000) scales the load up by ``UNDERWAY_CRASH_KILLS / 200``.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from app import build
from harness import (
    SERVICE_DELAY_S,
    Commit,
    Db,
    Plan,
    Tally,
    Workers,
    fencing_problems,
    journals,
    scale,
    throwaway_postgres,
    unleash,
    verify,
)

from fakes.outside_service import OutsideService, Witness

# Hundreds of real processes take minutes on a busy machine, more than the suite's default
# limit (pyproject.toml), which is for tests that take seconds: this one only catches a
# hang. ``make soak`` (UNDERWAY_CRASH_KILLS) runs for as long as its load needs.
SUITE_TIMEOUT_S = 0 if os.environ.get("UNDERWAY_CRASH_KILLS") else 1800
pytestmark = [pytest.mark.crash, pytest.mark.timeout(SUITE_TIMEOUT_S)]

SEED = 20240611
LEASE_TTL = 1.0
QUIET_LEASE_TTL = 5.0
"""Where no worker is paused, a lease long enough that a busy machine never loses one."""
CONCURRENCY = 8


def db_url(backend: str, request: pytest.FixtureRequest) -> str:
    """A fresh database of ``backend``."""
    fixture = {"sqlite": "sqlite_url", "postgres": "pg_url",
               "pgbouncer": "pgbouncer_listen_url"}[backend]
    url: str = request.getfixturevalue(fixture)
    return url


def report(tally: Tally, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """Print what the test did, whatever the outcome."""
    with capsys.disabled():
        print(f"\n{name}[{tally.backend}] {tally.summary()}")


@pytest.mark.parametrize(
    ("backend", "n_workers"),
    [pytest.param("sqlite", 2, id="sqlite-2-workers"),
     pytest.param("postgres", 4, marks=pytest.mark.postgres, id="postgres-4-workers"),
     # Through PgBouncer in transaction mode, LISTEN on the server itself (listen_url).
     pytest.param("pgbouncer", 4, marks=pytest.mark.postgres, id="pgbouncer-4-workers")],
)
def test_workers_killed_and_frozen_lose_nothing_and_never_share_a_run(
    backend: str, n_workers: int, request: pytest.FixtureRequest, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    k = scale()
    plan = Plan(runs=200 * k, seconds=15.0 * k, sigkills=6 * k, sigstops=6 * k,
                lease_ttl=LEASE_TTL)
    url = db_url(backend, request)
    tally = Tally(backend)
    with OutsideService(delay=SERVICE_DELAY_S) as svc:
        flows, tools = build(svc.url)
        db = Db(url, flows, tools)
        workers = Workers(url, svc.url, tmp_path, concurrency=CONCURRENCY, lease_ttl=LEASE_TTL)
        try:
            for _ in range(n_workers):
                workers.spawn()
            pauses = unleash(db, workers, plan, random.Random(SEED), tally)
            verify(db.engine, svc, workers, plan, pauses, tally)
        finally:
            workers.kill_all()
            db.close()
    report(tally, capsys, "chaos")
    assert not tally.problems, "\n".join(tally.problems[:20])
    assert tally.runs == plan.runs
    assert tally.sigkills == plan.sigkills
    assert tally.sigstops + tally.sigstops_skipped == plan.sigstops
    assert tally.sigstops >= plan.sigstops // 2, "most freezes hit a worker holding runs"
    # One replacement per SIGKILL: no worker died of anything else.
    assert tally.workers_started == n_workers + plan.sigkills
    assert tally.takeovers > 0, "no frozen worker's run was taken over: the pauses proved nothing"
    assert tally.refusals_logged > 0
    assert tally.duplicate_effects == 0


@pytest.mark.parametrize(
    ("backend", "n_workers"),
    [pytest.param("sqlite", 2, id="sqlite-2-workers"),
     pytest.param("postgres", 4, marks=pytest.mark.postgres, id="postgres-4-workers")],
)
def test_timers_due_together_fire_once_across_workers(
    backend: str, n_workers: int, request: pytest.FixtureRequest, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every run starts at the same instant, so their timers come due together while all
    workers compete for them: each timer fires once and the step after it runs once."""
    runs = 150 * scale()
    url = db_url(backend, request)
    tally = Tally(backend)
    with OutsideService(delay=SERVICE_DELAY_S) as svc:
        flows, tools = build(svc.url)
        db = Db(url, flows, tools)
        workers = Workers(url, svc.url, tmp_path, concurrency=CONCURRENCY,
                          lease_ttl=QUIET_LEASE_TTL)
        try:
            for _ in range(n_workers):
                workers.spawn()
            at = time.time() + 1.0
            for i in range(runs):
                db.engine.start("chaos", {"customer": f"c{i}", "loops": 1},
                                idempotency_key=f"chaos-{i}", start_at=at)
            plan = Plan(runs=runs, seconds=0.0, sigkills=0, sigstops=0, lease_ttl=QUIET_LEASE_TTL,
                        loops=1)
            pauses = unleash(db, workers, plan, random.Random(SEED), tally)
            verify(db.engine, svc, workers, plan, pauses, tally)
            _, witnessed = svc.ledger.snapshot_with_witnesses()
        finally:
            workers.kill_all()
            db.close()
    report(tally, capsys, "timers")
    assert not tally.problems, "\n".join(tally.problems[:20])
    assert tally.timers == runs
    assert tally.workers_started == n_workers
    settled = [w.run for w in witnessed if w.step == "settle" and w.at == "start"]
    assert len(settled) == len(set(settled)) == runs  # the step after each timer ran once


@pytest.mark.postgres
def test_postgres_restarted_mid_load_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Workers on a throwaway cluster; the server is restarted (``pg_ctl restart -m fast``)
    while runs are in flight. The workers reconnect and every run finishes as intended."""
    k = scale()
    plan = Plan(runs=150 * k, seconds=10.0 * k, sigkills=0, sigstops=0, lease_ttl=LEASE_TTL)
    restarts_at = [plan.seconds * (j + 0.5) / (2 * k) for j in range(2 * k)]
    tally = Tally("postgres-restart")
    with throwaway_postgres() as cluster, OutsideService(delay=SERVICE_DELAY_S) as svc:
        flows, tools = build(svc.url)
        db = Db(cluster.url, flows, tools)
        workers = Workers(cluster.url, svc.url, tmp_path, concurrency=CONCURRENCY,
                          lease_ttl=LEASE_TTL)
        progress: list[int] = []

        def restart_when_due(elapsed: float) -> bool:
            if restarts_at and elapsed >= restarts_at[0]:
                events = sum(len(j) for j in journals(db.store).values())
                # Only into a live load: once events were committed since the last restart
                # (however long a busy machine takes to commit the first ones).
                if events > (progress[-1] if progress else 0):
                    restarts_at.pop(0)
                    progress.append(events)
                    cluster.restart()
                    db.reopen()
                    tally.restarts += 1
            return bool(restarts_at)

        try:
            for _ in range(3):
                workers.spawn()
            pauses = unleash(db, workers, plan, random.Random(SEED), tally,
                             between=restart_when_due)
            verify(db.engine, svc, workers, plan, pauses, tally)
        finally:
            workers.kill_all()
            db.close()
    report(tally, capsys, "restart")
    assert not tally.problems, "\n".join(tally.problems[:20])
    assert tally.restarts == 2 * k
    assert tally.workers_started == 3  # the same workers carried on: none died and was replaced
    assert tally.runs == plan.runs
    # The restarts hit a live load: events were committed before each and after the last.
    assert progress[0] > 0 and progress == sorted(progress) and progress[-1] < tally.events


def test_the_fencing_check_catches_a_write_under_a_superseded_lease() -> None:
    """The journal checks above can fail: a commit made under an older lease after a newer
    one was at work on the run is reported, whether or not the newer one got to commit."""
    a, b = "host:x:1:1", "host:x:2:1"
    honest = [Commit(5, "lookup", "end", a, 1, 1), Commit(9, "charge", "end", a, 1, 5),
              Commit(14, "settle", "end", b, 2, 9)]
    b_at_work = Witness("r", "settle", "start", b, 2, 9, 0.0)
    assert fencing_problems("r", honest, [b_at_work]) == []
    # A frozen worker's late commit landed after the new holder's own.
    backwards = [*honest, Commit(17, "lap", "end", a, 1, 9)]
    assert fencing_problems("r", backwards, [])
    # The new holder was at work from seq 9 and got nothing committed (its append lost the
    # race), while the old one committed under its superseded lease.
    stolen = [*honest[:2], Commit(13, "settle", "end", a, 1, 9)]
    assert not fencing_problems("r", stolen, [])
    assert fencing_problems("r", stolen, [b_at_work])
    # One token, two owners.
    assert fencing_problems("r", [*honest[:2], Commit(12, "settle", "end", b, 1, 9)], [])
