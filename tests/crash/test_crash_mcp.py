"""MCP tool calls across worker SIGKILLs, on SQLite and PostgreSQL.

A real worker process calls tools of a real MCP server (tests/integration/mcp/server.py):
one over Streamable HTTP, one over stdio inside the sandbox. It is killed with SIGKILL
while each held call is in flight. The server's ledger, outside every worker, counts what
ran:

- the idempotent ``hold_put`` is retried under the same idempotency key, which the server
  recognizes: it stored once;
- the mutating, non-idempotent ``hold`` is never sent again: the run escalates to a
  person, who settles it from the ledger, and the run completes;
- the read-only ``peek``, killed in flight, simply runs again; the read-only ``lookup``,
  journaled with the first intent, is not asked again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "mcp"))

import mcp_ledger

from underway import events as ev
from underway.client import Client
from underway.journal import Journal
from underway.store import connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("mcp_worker.py")
CHILD_TIMEOUT_S = 180.0
"""Against a hang only."""


def spawn(url: str, ledger: Path, http_url: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--db", url, "--ledger", str(ledger), "--http", http_url],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_when_held(proc: subprocess.Popen[str], ledger: Path, label: str) -> None:
    """SIGKILL the worker once the server holds its call ``label`` (or fail if the worker
    ends first)."""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not (ledger / f"holding-{label}").exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the worker ended before {label} was held: {out}{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{label} was never held")
        time.sleep(0.01)
    proc.kill()
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def finish(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 0, err
    answer: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_no_mcp_effect_runs_twice_across_sigkills(db: str, tmp_path: Path,
                                                  request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    connect(url).close()
    ledger = mcp_ledger.ledger(tmp_path)
    server, http_url = mcp_ledger.start_http(ledger)
    try:
        kill_when_held(spawn(url, ledger, http_url), ledger, "put")
        (ledger / "release-put").touch()
        kill_when_held(spawn(url, ledger, http_url), ledger, "peek")
        (ledger / "release-peek").touch()
        kill_when_held(spawn(url, ledger, http_url), ledger, "post")
        (ledger / "release-post").touch()
        escalated = finish(spawn(url, ledger, http_url))
        assert escalated["status"] == "escalated"
        done = Counter(e["tool"] for e in mcp_ledger.effects(ledger))
        assert done == {"hold_put": 1, "peek": 2, "hold": 1}, "no mutating MCP tool ran twice"

        # The operator reads the server's ledger: the post happened. The run goes on.
        (posted,) = [e for e in mcp_ledger.effects(ledger) if e["tool"] == "hold"]
        run_id = str(escalated["run_id"])
        client = Client.connect(url)
        try:
            escalation = client.state(run_id).escalation
            assert escalation is not None and escalation.tool == "box_hold"
            assert escalation.key == posted["key"], "the call kept its key"
            client.resolve(run_id, resolution="succeeded", result={"result": "held post"},
                           by="operator")
        finally:
            client.close()
        completed = finish(spawn(url, ledger, http_url))
    finally:
        server.kill()
        server.wait()
        if server.stderr is not None:
            server.stderr.close()

    assert completed["status"] == "completed"
    assert completed["result"] == {
        "price": {"item": "tea", "price": 30}, "stored": {"result": "stored put (again)"},
        "seen": {"result": "peeked peek"}, "posted": {"result": "held post"}}
    assert Counter(e["tool"] for e in mcp_ledger.effects(ledger)) == {
        "hold_put": 1, "peek": 2, "hold": 1}
    store = connect(url)
    try:
        history = [r.event for r in Journal(store).history("default", run_id)]
    finally:
        store.close()
    started = Counter(e.tool for e in history if isinstance(e, ev.ToolStarted))
    # One intent each: the idempotent call was sent again under its intent's key (the
    # server answered "again"), the other never.
    assert started == {"web_hold_put": 1, "box_hold": 1}
    succeeded = [e.tool for e in history if isinstance(e, ev.ToolSucceeded)]
    # The lookup's result was committed with the first intent: journaled, never asked again.
    assert succeeded.count("web_lookup") == 1
    assert "box_hold" not in succeeded, "the post was settled by a person, not run again"
