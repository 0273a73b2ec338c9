"""A retention sweep that forgets, killed with SIGKILL, on SQLite and PostgreSQL: real
``underway retention sweep`` processes are killed at seeded fault points — before a
forget, inside a forget's transaction before it commits. After every kill each purged run
is either whole (row, every event, purge record) or gone with exactly one line of the
forget log naming the head it ended at; the audit with anchors taken before the sweeps
passes, telling the forgotten runs from lost ones; the held and the waiting run are
untouched. A last sweep forgets the rest."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from test_crash_retention import populate

from fakes.processes import finish
from underway.guard.approvals import generate_keypair, load_private_key, write_private_key
from underway.ops import audit
from underway.store import Store, connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

UNDERWAY = Path(sys.executable).with_name("underway")
FORGET_POINTS = "retention.before_forget,retention.forget_uncommitted"
"""The points each run's forget passes, in this order."""
FAULT_KILLS = 5


def sweeper(config: Path, tenant: str, crash_after: int | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after), UNDERWAY_CRASH_POINTS=FORGET_POINTS)
    return subprocess.Popen([str(UNDERWAY), "retention", "sweep", "--config", str(config),
                             "--tenant", tenant],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def check(store: Store, tenant: str, heads: dict[str, tuple[int, str, int]],
          anchors: audit.Anchors) -> int:
    """Every run whole or forgotten whole; how many are forgotten."""
    report = audit.verify(store, anchors=anchors)
    assert report.ok, [f.describe() for f in report.findings]
    log = {f.run_id: f for f in store.forgotten_runs(tenant)}
    assert [f.seq for f in store.forgotten_runs(tenant)] == list(range(1, len(log) + 1))
    forgotten = 0
    for run_id, (last_seq, head, events) in heads.items():
        row = store.get_run(tenant, run_id)
        if row is None:
            forgotten += 1
            assert store.load_events(tenant, run_id) == []
            assert store.purged_runs(tenant, run_id=run_id) == []
            assert (log[run_id].last_seq, log[run_id].head) == (last_seq, head)
        else:
            assert run_id not in log, f"run {run_id} is forgotten in part"
            assert (row.last_seq, row.last_hash) == (last_seq, head)
            assert len(store.load_events(tenant, run_id)) == events
    assert report.forgotten == forgotten == len(log)
    return forgotten


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_killed_sweep_forgets_each_run_whole_or_not_at_all(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    store = connect(url)
    t = "acme"
    purgeable, kept, held = populate(store, t)
    pem, public = generate_keypair()
    write_private_key(tmp_path / "anchor.pem", pem)
    anchor_log = audit.FileAnchorLog(tmp_path / "anchors.jsonl")
    audit.anchor(store, load_private_key(tmp_path / "anchor.pem"), anchor_log)
    anchors = audit.read_anchors(anchor_log.lines(), audit.load_public_key(public))
    heads = {}
    for run_id in purgeable:
        row = store.get_run(t, run_id)
        assert row is not None
        heads[run_id] = (row.last_seq, row.last_hash, len(store.load_events(t, run_id)))
    untouched = {r: store.load_events(t, r) for r in kept}
    config = tmp_path / "underway.toml"
    config.write_text(f'database = "{url}"\n[retention]\ncompleted = "30d"\n'
                      'failed = "30d"\nforget_after = "60d"\n', encoding="utf-8")
    rng = random.Random(f"forget-{backend}")
    forgotten, kills = 0, 0
    # Each forget passes two points: before it, inside its transaction (not committed).
    for n in range(FAULT_KILLS):
        kills += finish(sweeper(config, t, 2 * rng.randint(0, 3) + n % 2 + 1))
        now = check(store, t, heads, anchors)
        assert now >= forgotten
        forgotten = now
    assert kills == FAULT_KILLS, "the sweeps were killed"
    assert forgotten < len(purgeable)
    proc = sweeper(config, t, None)
    assert not finish(proc)
    assert check(store, t, heads, anchors) == len(purgeable)
    assert {r: store.load_events(t, r) for r in kept} == untouched
    assert store.get_run(t, held) is not None
    [last] = store.list_sweeps(t, limit=1)
    assert last.finished_at is not None and last.forgotten > 0
