"""One trace across a worker SIGKILL, on SQLite and PostgreSQL.

A run is started over HTTP with a ``traceparent``. A real worker process, exporting each
span to a file as it ends, kills itself right after the run's charge ran and before its
outcome was journaled; a second worker process takes the run over once the lease expires
and finishes it. Both processes' spans make one trace, in the caller's trace id; every
span's parent chain reaches the caller's span (a killed worker leaves no orphan, and the
step it was killed in is made from the journal by its successor); the activation, step,
tool, policy and model spans are all there; and no argument, result or prompt value
appears in any attribute or event, except the one field the quote tool opts in to
record — never its secret argument or sensitive result field.
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
from typing import Any

import httpx
import pytest
from traced_worker import CARD, CHARGE_RUNS, CUSTOMER, INVOICE

import underway as uw
from fakes.span_files import read_spans
from underway.apikeys import issue_key
from underway.service import ServerThread, create_app
from underway.store import connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORKER = Path(__file__).with_name("traced_worker.py")
TESTS = Path(__file__).resolve().parents[1]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CHILD_TIMEOUT_S = 120.0
"""Against a hang only: a worker that has not finished by then has a stuck run."""


def worker(url: str, spans: Path, run_id: str, *, crash_after: int | None = None
           ) -> subprocess.CompletedProcess[str]:
    """Run one worker process to its end (or its SIGKILL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    if crash_after is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after),
                   UNDERWAY_CRASH_POINTS="effect.after_run")
    return subprocess.run(
        [sys.executable, str(WORKER), "--db", url, "--spans", str(spans), "--run", run_id],
        env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def start_run(url: str) -> str:
    """Start the run over HTTP, in the caller's trace."""
    store = connect(url)
    try:
        token = issue_key(store, tenant_id="default", role="operator", name="op",
                          now=time.time()).token
        with ServerThread(create_app(uw.Client(store))) as server, \
                httpx.Client(base_url=server.url) as http:
            r = http.post("/v1/runs", json={"flow": "traced_orders", "input": {
                "customer": CUSTOMER, "card": CARD, "invoice": INVOICE}},
                headers={"Authorization": f"Bearer {token}",
                         "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
            assert r.status_code == 201, r.text
            return str(r.json()["run_id"])
    finally:
        store.close()


def values(span: dict[str, Any]) -> str:
    """Every attribute and event value of a span, as one text."""
    return json.dumps([span["attributes"], span["events"]])


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_run_killed_mid_step_is_one_trace_without_argument_values(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    run_id = start_run(url)
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()

    first = worker(url, spans_dir, run_id, crash_after=CHARGE_RUNS)
    assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
    killed = read_spans(spans_dir)
    assert killed, "the killed worker exported the spans it ended"
    second = worker(url, spans_dir, run_id)
    assert second.returncode == 0, second.stderr[-4000:]
    assert second.stdout.split() == ["completed"]

    spans = read_spans(spans_dir)
    assert len({s["pid"] for s in spans}) == 2
    assert {s["trace_id"] for s in spans} == {TRACE_ID}
    by_id = {s["span_id"]: s for s in spans}
    for s in spans:
        seen, parent = [s["name"]], s["parent_id"]
        while parent != CALLER_SPAN:
            assert parent in by_id, f"{' <- '.join(seen)}: parent {parent} was never exported"
            seen.append(by_id[parent]["name"])
            parent = by_id[parent]["parent_id"]

    names = Counter(s["name"] for s in spans)
    assert names == Counter({
        "underway.activation traced_orders": 2,
        "underway.step look_up": 1,
        # the attempt the first worker died in (made by the second), and the one that ended
        "underway.step charge_card": 2,
        "underway.step finish": 1,
        "underway.policy find_customer": 1,
        "underway.tool find_customer": 1,
        "underway.policy quote": 1,
        "underway.tool quote": 1,
        # decided again before the charge whose outcome the kill hid was tried again
        "underway.policy charge": 2,
        "underway.tool charge": 1,
        "chat claude-test": 1,
    }), names
    takeovers = sorted(s["attributes"]["underway.takeover"] for s in spans
                       if s["name"].startswith("underway.activation"))
    assert takeovers == [False, True]
    steps = [s for s in spans if s["name"] == "underway.step charge_card"]
    assert sorted(s["attributes"].get("underway.recovered", False) for s in steps) \
        == [False, True]
    killed_pids = {s["pid"] for s in killed}
    assert not [s for s in steps if s["pid"] in killed_pids], "the killed step came back"

    # Values: only the quote's opted-in fields, never its secret argument or token.
    (quoted,) = [s for s in spans if s["name"] == "underway.tool quote"]
    recorded = {k: v for k, v in quoted["attributes"].items()
                if k.startswith("underway.tool.")}
    assert recorded == {"underway.tool.args.invoice": INVOICE,
                        "underway.tool.result.invoice": INVOICE,
                        "underway.tool.result.cents": 1234}
    for s in spans:
        assert "SECRET" not in values(s), s
        assert "prompt" not in values(s) and "charged" not in values(s), s
