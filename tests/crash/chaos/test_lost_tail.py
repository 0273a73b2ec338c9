"""Without synchronous replication a failover can lose commits, and anchors detect it.

On a Patroni cluster with asynchronous replication (Patroni's default), runs are started
and the standby catches up. Then the primary's WAL sender is frozen (SIGSTOP): the
primary goes on committing, and the standby no longer hears of it. More runs start and
the journals' heads are anchored (``underway audit anchor``). The primary is killed and
Patroni promotes the standby, which never had those commits.

``underway audit verify`` alone passes: every journal left is an intact chain. With
``--anchors`` it fails (exit 1) and names the runs whose anchored heads are gone. The
runs started before the freeze are all there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from ha_cluster import patroni_cluster
from pydantic import BaseModel

from underway import Engine, Flow, RunContext, connect

pytestmark = [pytest.mark.crash, pytest.mark.postgres, pytest.mark.timeout(600)]

UNDERWAY = Path(sys.executable).with_name("underway")


class Nothing(BaseModel):
    """No input, no state."""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``underway *args``."""
    return subprocess.run([str(UNDERWAY), *args], capture_output=True, text=True,
                          timeout=300, check=False)


def test_async_failover_loses_a_tail_and_the_anchors_say_so(tmp_path: Path) -> None:
    flow: Flow[Nothing, Nothing] = Flow("noop", state=Nothing, input=Nothing)

    @flow.step(start=True)
    async def only(ctx: RunContext[Nothing, Nothing]) -> Any:
        return ctx.done({})

    key, log = tmp_path / "anchor.pem", tmp_path / "anchors.jsonl"
    made = cli("audit", "keygen", "--out", str(key))
    assert made.returncode == 0, made.stderr
    public = made.stdout.split("public key: ")[1].split()[0]
    with patroni_cluster(synchronous=False) as cluster:
        url = cluster.url
        leader, standby = cluster.wait_healthy()
        engine = Engine(connect(url), flows=[flow])
        try:
            kept = [engine.start("noop", {}, idempotency_key=f"kept-{i}")[0] for i in range(5)]
            # The standby has replayed everything so far.
            with psycopg.connect(leader.url, autocommit=True) as conn:
                row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                assert row is not None
                written = row[0]
                senders = [int(r[0]) for r in conn.execute(
                    "SELECT pid FROM pg_stat_replication").fetchall()]
            assert senders
            with psycopg.connect(standby.url, autocommit=True) as conn:
                while True:
                    row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                       [written]).fetchone()
                    if row is not None and row[0]:
                        break
            for pid in senders:
                os.kill(pid, signal.SIGSTOP)
            lost = [engine.start("noop", {}, idempotency_key=f"lost-{i}")[0] for i in range(5)]
            anchored = cli("audit", "anchor", "--db", url, "--key", str(key), "--log", str(log))
            assert anchored.returncode == 0, anchored.stderr
            assert "anchored 10 runs" in anchored.stdout, anchored.stdout
        finally:
            engine.store.close()
        cluster.kill(leader)
        cluster.wait_writable(not_on=leader)
        plain = cli("audit", "verify", "--db", url)
        checked = cli("audit", "verify", "--db", url, "--anchors", str(log),
                      "--public-key", public)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert checked.returncode == 1, checked.stdout + checked.stderr
    report = checked.stdout + checked.stderr
    assert all(run_id in report for run_id in lost), report
    assert not any(run_id in report for run_id in kept), report
