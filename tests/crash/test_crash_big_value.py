"""A worker killed (SIGKILL) while it writes the chunks of a large value, on SQLite and
PostgreSQL: the chunks written are referred to by nothing (no blob row, no event), the
journal still verifies, and a second worker takes the run over, writes the value again and
finishes it with the value whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from big_value_worker import value

from fakes.processes import finish
from underway import events as ev
from underway.journal import Journal
from underway.ops import audit
from underway.store import Store, connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("big_value_worker.py")
CHUNK = 4096
SIZE = CHUNK * 12 + 5
KILL_AFTER = 4
"""Chunks written before the kill."""


def worker(url: str, crash_after: int | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after),
                   UNDERWAY_CRASH_POINTS="blob.after_chunk")
    return subprocess.Popen([sys.executable, str(WORKER), "--db", url, "--size", str(SIZE),
                             "--chunk", str(CHUNK)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def rows(store: Store, sql: str) -> list[Any]:
    db: Any = store
    if hasattr(db, "_pool"):
        with db._pool.connection() as conn:
            return list(conn.execute(sql).fetchall())
    return list(db._conn.execute(sql).fetchall())


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_kill_mid_chunks_leaves_nothing_referred_to_and_the_run_finishes(
        db: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    assert finish(worker(url, crash_after=KILL_AFTER)), "killed while writing chunks"
    store = connect(url, migrate=False)
    [(run_id,)] = rows(store, "SELECT run_id FROM runs")
    assert len(rows(store, "SELECT idx FROM blob_chunks")) == KILL_AFTER
    manifests = "SELECT key FROM blobs WHERE substr(data, 1, 1) = " + (
        "x'02'" if db == "sqlite" else "'\\x02'::bytea")
    assert rows(store, manifests) == [], "no blob row refers to the partial chunks"
    journal = Journal(store)
    assert not [r for r in journal.history("default", run_id)
                if isinstance(r.event, ev.ToolSucceeded)], "no event refers to them"
    assert audit.verify(store, tenant_id="default", run_id=run_id).findings == []

    assert not finish(worker(url)), "the second worker finishes the run"
    state = Journal(store).load("default", run_id)
    assert state.status == "completed"
    assert isinstance(state.state, dict) and state.state["text"] == value(SIZE)
    assert len(rows(store, "SELECT idx FROM blob_chunks")) == 13
    assert len(rows(store, manifests)) == 1, "the blob's row came with its event"
    assert audit.verify(store, tenant_id="default", run_id=run_id).findings == []
    store.close()
