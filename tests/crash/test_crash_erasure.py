"""An erasure killed with SIGKILL, on SQLite and PostgreSQL: real ``underway erase subject``
processes are killed at seeded fault points — before a run is reduced to its skeleton, (on
PostgreSQL) inside that purge's transaction, before the vault secret is destroyed, between
that and the database's keys and log — and from outside a seeded moment after they began.
After every kill each run of the subject is either purged whole or untouched byte for
byte, every journal verifies, the other subject's run is untouched; a last erasure finishes
the job: every run a skeleton, the subject's keys and vault secret destroyed, the erasure
logged, nothing of the subject readable."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import underway as uw
from fakes.processes import finish
from fakes.retention_world import CANARIES, engine_for, start
from underway.crypto import KeyringFile, encrypt
from underway.events import is_tombstone
from underway.ops import audit
from underway.store import Store, connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

UNDERWAY = Path(sys.executable).with_name("underway")
RUNS = 8
FAULT_KILLS, OUTSIDE_KILLS = 5, 3
TENANT = "acme"


def eraser(url: str, keyring: Path, *, crash_after: int | None = None,
           points: str = "") -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after), UNDERWAY_CRASH_POINTS=points)
    return subprocess.Popen(
        [str(UNDERWAY), "--keyring", str(keyring), "erase", "subject", "ann", "--db", url,
         "--tenant", TENANT, "--by", "dpo", "--reason", "request 11"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def check(store: Store, before: dict[str, list[bytes]], other: str) -> int:
    """Every run purged whole or untouched, every journal verifying; how many purged."""
    report = audit.verify(store)
    assert report.ok, [f.describe() for f in report.findings]
    purged = 0
    for run_id, payloads in before.items():
        now = [e.payload for e in store.load_events(TENANT, run_id)]
        stones = [is_tombstone(p) for p in now]
        if all(stones):
            purged += run_id != other
        else:
            assert not any(stones), f"run {run_id} is purged in part"
            assert now == payloads
    assert not any(is_tombstone(e.payload) for e in store.load_events(TENANT, other))
    return purged


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_killed_erasure_leaves_no_run_half_purged_and_finishes(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    keyring = tmp_path / "underway.keyring"
    store = connect(url)
    encrypt(store, KeyringFile.create(keyring))
    engine, _ = engine_for(store)
    runs = [start(engine, "letter", tenant=TENANT, subject="ann") for _ in range(RUNS)]
    other = start(engine, "letter", tenant=TENANT, subject="bob")
    asyncio.run(uw.Runner(engine).run_until_idle())
    for run_id in [*runs, other]:
        engine.signal(run_id, "sent", {"receipt": CANARIES[0]}, tenant_id=TENANT)
    asyncio.run(uw.Runner(engine).run_until_idle())
    before = {r: [e.payload for e in store.load_events(TENANT, r)] for r in [*runs, other]}
    rng = random.Random(f"erasure-{backend}")
    # Each run still about the subject passes "before its purge" (and, on PostgreSQL, a
    # point inside the purge's transaction): a seeded one of them kills the erasure.
    per_run = 2 if backend == "postgres" else 1
    points = "erasure.before_purge" + (",retention.purge_uncommitted" if per_run == 2 else "")
    kills, purged = 0, 0
    for _ in range(FAULT_KILLS):
        left = len(store.runs_of_subject(TENANT, "ann"))
        if not left:
            break
        kills += finish(eraser(url, keyring, crash_after=rng.randint(1, per_run * left),
                               points=points))
        now = check(store, before, other)
        assert now >= purged and store.list_erasures(TENANT) == []
        purged = now
    # Then once every run is a skeleton: before the vault's secret goes, and between it
    # and the database's keys and log.
    for point in ("erasure.before_vault", "erasure.before_log"):
        kills += finish(eraser(url, keyring, crash_after=1, points=point))
        assert check(store, before, other) == RUNS and store.list_erasures(TENANT) == []
    assert KeyringFile(keyring).vault.subject_secret(TENANT, "ann", create=False) is None
    assert any(k.state == "active" for k in store.list_data_keys(TENANT)
               if k.scope == "subject:ann")
    for _ in range(OUTSIDE_KILLS):
        kills += finish(eraser(url, keyring), kill_after=rng.uniform(0.0, 0.3))
        assert check(store, before, other) == RUNS
    assert kills >= 4, "the erasures were killed"
    assert finish(eraser(url, keyring)) is False  # the last one finishes the job
    assert check(store, before, other) == RUNS
    log = store.list_erasures(TENANT, subject="ann")
    assert log and log[-1].vault in ("destroyed", "absent")
    assert all(k.state == "destroyed" for k in store.list_data_keys(TENANT)
               if k.scope == "subject:ann")
    assert KeyringFile(keyring).vault.subject_secret(TENANT, "ann", create=False) is None
    readable = repr([uw.Client(store).events(r, tenant_id=TENANT) for r in runs])
    assert not [c for c in CANARIES if c in readable]
    assert CANARIES[0] in repr(uw.Client(store).events(other, tenant_id=TENANT))
    store.close()
