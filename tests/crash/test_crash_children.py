"""Child runs survive SIGKILL, on SQLite and PostgreSQL.

A worker process (``children_worker.py``) starts parent runs that each start one child run
and wait for its result. It is killed with SIGKILL between a parent's journaled intent and
the child's creation (``child.before_create``), after the child's creation before the
parent's next commit (``child.after_create``), while the parents wait for their children
(``--until-waiting``), between a child's final event and its parent's wake-up
(``signals.after_commit``: the child's end and the signal to its parent are committed,
nothing has read it), and at seeded points anywhere; fresh processes then take over.

What is checked against the store: exactly one child per parent, each parent completes
with its own child's result, each child carries its parent's whole lineage, every journal
is contiguous and verifies, and whatever was committed before a kill is still there byte
for byte.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from children_worker import parent_key, parent_lineage

from fakes.invariants import Journals, check_prefix, journals
from underway import connect
from underway import events as ev
from underway.journal import Journal
from underway.store.base import Store

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

WORKER = Path(__file__).with_name("children_worker.py")
PARENTS = 4
CHILD_TIMEOUT_S = 120.0
BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
POINTS = ("child.before_create", "child.after_create", "signals.after_commit")


def run_worker(url: str, tenant: str, *, crash_after: int | None = None,
               points: str | None = None, until_waiting: bool = False) -> tuple[bool, int]:
    """Run one worker process to its end: (killed by SIGKILL, fault points passed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env["UNDERWAY_CRASH_AFTER"] = str(crash_after)
    if points is not None:
        env["UNDERWAY_CRASH_POINTS"] = points
    cmd = [sys.executable, str(WORKER), "--db", url, "--tenant", tenant,
           "--runs", str(PARENTS)]
    if until_waiting:
        cmd.append("--until-waiting")
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=CHILD_TIMEOUT_S)
    if proc.returncode == -signal.SIGKILL:
        return True, 0
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    return False, int(json.loads(proc.stdout.decode().strip().splitlines()[-1])["hits"])


def check_batch(store: Store, tenant: str) -> list[str]:
    """Every parent completed with its one child's result; journals verify."""
    problems = []
    journal = Journal(store)
    rows = store.list_runs(tenant, limit=10_000)
    parents = {r.idempotency_key: r for r in rows if r.flow == "order"}
    children = [r for r in rows if r.flow == "charge"]
    if sorted(map(str, parents)) != sorted(parent_key(tenant, i) for i in range(PARENTS)):
        problems.append(f"parents {sorted(map(str, parents))}")
    by_parent: dict[str, list[str]] = {}
    for row in children:
        parent = journal.load(tenant, row.run_id).parent_run_id
        by_parent.setdefault(str(parent), []).append(row.run_id)
    for row in rows:
        audit = journal.verify(tenant, row.run_id)
        if not audit.ok:
            problems.append(f"{row.run_id}: journal does not verify: {audit}")
    for row in parents.values():
        state = journal.load(tenant, row.run_id)
        mine = by_parent.get(row.run_id, [])
        starts = [r for r in journal.history(tenant, row.run_id)
                  if isinstance(r.event, ev.ChildStarted)]
        if len(mine) != 1 or len(starts) != 1 or starts[0].event.run_id != mine[0]:
            problems.append(f"parent {row.run_id}: children {mine}, intents {len(starts)}")
            continue
        child = journal.load(tenant, mine[0])
        # Never a child without its lineage: whatever killed the worker, the child's own
        # start event holds everything its parent had.
        i = int(str(row.idempotency_key).rsplit("-", 1)[1])
        if state.lineage != parent_lineage(tenant, i):
            problems.append(f"parent {row.run_id}: lineage {state.lineage}")
        if child.lineage != state.lineage.descend(row.run_id):
            problems.append(f"child {mine[0]}: lineage {child.lineage} lacks its parent's "
                            f"{state.lineage}")
        want = {"child": mine[0], "status": "completed", "charged": child.result}
        if state.status != "completed" or state.result != want:
            problems.append(f"parent {row.run_id}: {state.status} {state.result} != {want}")
        if child.status != "completed" or not isinstance(child.result, dict) \
                or not child.result.get("receipt"):
            problems.append(f"child {mine[0]}: {child.status} {child.result}")
    return problems


def finish_batch(url: str, store: Store, tenant: str, before: Journals) -> list[str]:
    """Let a clean worker finish the batch; what was committed before must survive."""
    killed, _ = run_worker(url, tenant)
    assert not killed
    problems: list[str] = []
    check_prefix(before, journals(store, tenant), problems, "after the takeover")
    return problems + check_batch(store, tenant)


def db_url(backend: str, request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    return url


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_a_child_run_boundary_loses_nothing(
    backend: str, point: str, request: pytest.FixtureRequest,
) -> None:
    url = db_url(backend, request)
    store = connect(url)
    try:
        problems = []
        for nth in (1, PARENTS):
            tenant = f"t{nth}"
            killed, _ = run_worker(url, tenant, crash_after=nth, points=point)
            assert killed, f"the worker never passed {point} {nth} times"
            problems += finish_batch(url, store, tenant, journals(store, tenant))
        assert not problems, "\n".join(problems)
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_kill_while_parents_wait_for_their_children_loses_nothing(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url = db_url(backend, request)
    store = connect(url)
    try:
        killed, _ = run_worker(url, "t", until_waiting=True)
        assert killed
        waiting = store.list_runs("t", status="waiting", flow="order")
        assert waiting and all(r.lease_owner is None for r in waiting)
        problems = finish_batch(url, store, "t", journals(store, "t"))
        assert not problems, "\n".join(problems)
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_kills_anywhere_leave_one_child_per_parent(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url = db_url(backend, request)
    store = connect(url)
    try:
        killed, hits = run_worker(url, "clean", crash_after=10**9)
        assert not killed and hits > 0
        problems = check_batch(store, "clean")
        for seed in range(4):
            rng = random.Random(seed)
            tenant = f"seed{seed}"
            before: Journals = {}
            for _ in range(rng.randint(1, 3)):
                run_worker(url, tenant, crash_after=rng.randint(1, hits))
                after = journals(store, tenant)
                check_prefix(before, after, problems, f"{tenant}: after a kill")
                before = after
            problems += [f"{tenant}: {p}" for p in finish_batch(url, store, tenant, before)]
        assert not problems, "\n".join(problems)
    finally:
        store.close()
