"""A durable Agents SDK agent across worker SIGKILLs, on SQLite and PostgreSQL.

Worker processes run one agent run whose model (the SDK's Chat Completions model) is a
local server and whose tool records non-idempotent effects in an outside service. Each
turn the model asks for two calls at once, which the SDK starts together. The
first is killed with SIGKILL at its first fault point, the next at its second, and so on,
until one finishes the run: every kind of commit and effect boundary is hit once. The
model server counts the requests of each turn and the service the deliveries of each key.
A turn whose answer was journaled before a kill is never asked again (one killed after
the answer arrived and before it committed is asked again: that request did not complete),
no effect is performed twice, and the run finishes with the model's answer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.agent_wire import AgentWire
from fakes.outside_service import OutsideService
from underway import events as ev
from underway.journal import Journal
from underway.store import connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

WORKER = Path(__file__).with_name("openai_agents_worker.py")
TURNS = 3
"""Turns with tool calls: the model asks for ``record`` in three turns, then answers."""
CALLS = 2
"""Calls the model asks for in each of those turns."""
CHILD_TIMEOUT_S = 120.0
"""Against a hang only."""


def worker(url: str, wire: AgentWire, svc: OutsideService,
           crash_after: int | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]),
                                         env.get("PYTHONPATH", "")])
    if crash_after is not None:
        env["UNDERWAY_CRASH_AFTER"] = str(crash_after)
    return subprocess.run(
        [sys.executable, str(WORKER), "--db", url, "--model", wire.url, "--service", svc.url],
        env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def answered_turns(url: str) -> set[int]:
    """The turns whose model response the run's journal holds (none before it starts)."""
    store = connect(url)
    try:
        rows = store.list_runs("default")
        if not rows:
            return set()
        history = Journal(store).history("default", rows[0].run_id)
        return set(range(sum(isinstance(r.event, ev.ModelResponded) for r in history)))
    finally:
        store.close()


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_kills_at_every_fault_point_repeat_no_model_request_or_effect(
        db: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url"))
    connect(url).close()
    kills = 0
    with AgentWire(turns=TURNS, calls=CALLS) as wire, OutsideService() as svc:
        for crash_after in range(1, 200):
            journaled = answered_turns(url)
            before = dict(wire.asked)
            proc = worker(url, wire, svc, crash_after)
            # What was journaled before this process started is read, never asked again.
            assert {t: wire.asked[("run-0", t)] for t in journaled} == {
                t: before[("run-0", t)] for t in journaled}
            if proc.returncode == 0:
                break
            assert proc.returncode == -signal.SIGKILL, proc.stderr
            kills += 1
        else:
            pytest.fail("the run never finished")
        asked = dict(wire.asked)
        effects = svc.ledger.snapshot()
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["results"] == ["done run-0"]
    assert kills >= TURNS * CALLS  # the kills spread over the whole run, not a lucky few
    assert set(asked) == {("run-0", t) for t in range(TURNS + 1)}
    # Each tool call took effect once, whatever the kill hid from the journal.
    assert sorted((d.payload["step"], d.payload["part"]) for d in effects.values()) == [
        (t, p) for t in range(TURNS) for p in range(CALLS)]
    assert all(d.performed == 1 for d in effects.values()), effects
    store = connect(url)
    try:
        (row,) = store.list_runs("default")
        history = [r.event for r in Journal(store).history("default", row.run_id)]
    finally:
        store.close()
    assert row.status == "completed"
    assert sum(isinstance(e, ev.ModelResponded) for e in history) == TURNS + 1
    succeeded = [e for e in history if isinstance(e, ev.ToolSucceeded)]
    assert sorted(e.key for e in succeeded) == sorted(effects)
    # The calls of a turn are journaled in the model's order, whatever the kills.
    assert [(e.args["step"], e.args["part"]) for e in history
            if isinstance(e, ev.ToolStarted)] == [(t, p) for t in range(TURNS)
                                                  for p in range(CALLS)]
