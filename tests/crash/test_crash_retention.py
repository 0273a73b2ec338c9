"""A retention sweep killed with SIGKILL, on SQLite and PostgreSQL: real ``underway
retention sweep`` processes are killed at seeded fault points — before a purge, inside a
purge's transaction before it commits, after it, before the blob collection — and from
outside a seeded moment after they began. After every kill each run is either purged whole
or untouched byte for byte, every journal verifies, every run reads (skeleton or not)
without an error, the held run is untouched; a last sweep finishes the job: every run past
its period purged, the blobs nothing refers to deleted, the sweep log showing the sweeps
that did not end."""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

import underway as uw
from fakes.processes import CHILD_TIMEOUT_S, finish
from fakes.retention_world import CANARIES, engine_for, start
from underway.events import is_tombstone
from underway.journal import Journal
from underway.ops import audit
from underway.privacy.retention import mark_blobs
from underway.store import Store, connect
from underway.store.base import HoldRecord

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

UNDERWAY = Path(sys.executable).with_name("underway")
PURGE_POINTS = "retention.before_purge,retention.purge_uncommitted,retention.after_purge"
"""The points each run's purge passes, in this order."""
LETTERS, FAILURES = 24, 6
FAULT_KILLS, OUTSIDE_KILLS = 6, 4


def populate(store: Store, tenant: str) -> tuple[list[str], list[str], str]:
    """Runs of ``tenant`` that ended long ago — letters (completed), failures — and runs
    kept: a held letter and a waiting run. Returns (purgeable, kept, held)."""
    engine, _ = engine_for(store)
    letters = [start(engine, "letter", tenant=tenant,
                     who=f"customer {i} " * 4 + CANARIES[i % 3]) for i in range(LETTERS)]
    failures = [start(engine, "doomed", tenant=tenant) for _ in range(FAILURES)]
    held = start(engine, "letter", tenant=tenant, subject="litigant")
    waiting = start(engine, "waiting", tenant=tenant)
    asyncio.run(uw.Runner(engine).run_until_idle())
    for run_id in [*letters, held]:
        engine.signal(run_id, "sent", {"receipt": CANARIES[0]}, tenant_id=tenant)
    asyncio.run(uw.Runner(engine).run_until_idle())
    store.put_hold(HoldRecord(tenant, "subject", "litigant", "case 12", "counsel", 0.0))
    return letters + failures, [held, waiting], held


def age_blobs(url: str, seconds: float) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE blobs SET written_at = written_at - ?", (seconds,))
        return
    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".blobs SET written_at = written_at - %s', (seconds,))


def sweeper(config: Path, tenant: str, *, crash_after: int | None = None,
            points: str = PURGE_POINTS) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after), UNDERWAY_CRASH_POINTS=points)
    return subprocess.Popen([str(UNDERWAY), "retention", "sweep", "--config", str(config),
                             "--tenant", tenant],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def check(store: Store, tenant: str, before: dict[str, tuple[list[bytes], object]],
          held: str) -> int:
    """Every run purged whole or untouched, every journal verifying, every run readable;
    how many are purged."""
    report = audit.verify(store)
    assert report.ok, [f.describe() for f in report.findings]
    client, purged = uw.Client(store), 0
    for run_id, (payloads, checkpoint) in before.items():
        now = [e.payload for e in store.load_events(tenant, run_id)]
        stones = [is_tombstone(p) for p in now]
        if all(stones):
            purged += 1
            assert store.load_checkpoint(tenant, run_id) is None
            assert not [c for c in CANARIES if c.encode() in b"".join(now)]
            assert client.state(run_id, tenant_id=tenant).purged
        else:
            assert not any(stones), f"run {run_id} is purged in part"
            assert now == payloads and store.load_checkpoint(tenant, run_id) == checkpoint
            assert not client.state(run_id, tenant_id=tenant).purged
        assert len(client.events(run_id, tenant_id=tenant)) == len(now)
        assert client.history(run_id, tenant_id=tenant)
    assert [e.payload for e in store.load_events(tenant, held)] == before[held][0]
    return purged


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_killed_sweep_leaves_no_run_half_purged(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    store = connect(url)
    tenants = {t: populate(store, t) for t in ("acme", "globex")}
    age_blobs(url, 3 * 86_400.0)  # as if the runs wrote their blobs days ago
    before = {t: {r: ([e.payload for e in store.load_events(t, r)],
                      store.load_checkpoint(t, r)) for r in purgeable + kept}
              for t, (purgeable, kept, _) in tenants.items()}
    config = tmp_path / "underway.toml"
    config.write_text(f'database = "{url}"\n[retention]\ncompleted = "30d"\n'
                      'failed = "30d"\n', encoding="utf-8")
    rng = random.Random(f"retention-{backend}")
    t, held = "acme", tenants["acme"][2]
    kills, purged = 0, 0
    # Each run passes three points: before its purge, inside the purge's transaction (not
    # committed), after it. The n-th kill lands on the (n % 3)-th of some run's.
    for n in range(FAULT_KILLS):
        kills += finish(sweeper(config, t, crash_after=3 * rng.randint(0, 4) + n % 3 + 1))
        now = check(store, t, before[t], held)
        assert now >= purged
        purged = now
    for _ in range(OUTSIDE_KILLS):
        seen = {s.sweep_id for s in store.list_sweeps(t, limit=1000)}
        proc = sweeper(config, t)
        # Once the sweep has begun changing things (its log entry is written), kill it a
        # seeded moment on.
        while proc.poll() is None and not {
                s.sweep_id for s in store.list_sweeps(t, limit=1000)} - seen:
            time.sleep(0.005)
        kills += finish(proc, kill_after=rng.uniform(0.0, 0.05))
        now = check(store, t, before[t], held)
        assert now >= purged
        purged = now
    assert kills >= FAULT_KILLS, "the sweeps were killed"
    assert any(s.finished_at is None for s in store.list_sweeps(t, limit=1000))
    # The other tenant's sweep is killed once every run is purged, before it collects.
    other, other_held = "globex", tenants["globex"][2]
    assert finish(sweeper(config, other, crash_after=1, points="retention.before_collect"))
    assert check(store, other, before[other], other_held) == len(tenants[other][0])
    [entry] = store.list_sweeps(other)
    assert entry.finished_at is None and entry.blobs_deleted is None

    # The last sweep, of every tenant, finishes the job.
    done = subprocess.run([str(UNDERWAY), "retention", "sweep", "--config", str(config)],
                          capture_output=True, timeout=CHILD_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    for tenant, (purgeable, kept, held_run) in tenants.items():
        assert check(store, tenant, before[tenant], held_run) == len(purgeable)
        assert {p.run_id for p in store.purged_runs(tenant, limit=1000)} == set(purgeable)
        assert store.list_sweeps(tenant, limit=1)[0].finished_at is not None
        # Every blob nothing refers to is gone (a killed sweep may have deleted them before
        # it could log how many).
        marks = mark_blobs(Journal(store), tenant)
        assert set(store.blob_keys(tenant, limit=100_000)) == marks.reached
        for run_id in kept:
            assert uw.Client(store).state(run_id, tenant_id=tenant).purged is False
    store.close()
