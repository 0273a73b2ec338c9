"""Spans survive SIGKILLs, on SQLite and PostgreSQL, sent to a real OTLP/HTTP receiver.

A run is started over HTTP with a ``traceparent``. Three real worker processes drive it,
each exporting with the stock OTLP/HTTP exporter to a receiver in this test:

1. the first sends no batch before it is killed, right after the run's charge ran and
   before its outcome was journaled: every span of what it journaled is still unsent;
2. the second takes the run over once the lease expires and finishes it, then is killed
   just before it sends its only batch;
3. the third has nothing to run: at start it finds the run journaled past its span cursor
   and sends what the two before it journaled.

The receiver then holds exactly one span per step attempt, tool call, policy decision and
model call the journal holds (none lost, none twice), all in the caller's trace, each
parent chain reaching the caller's span. No argument, result or prompt value appears in
any attribute, except the one field the quote tool opts in to record.
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
from fakes.otlp_receiver import OtlpReceiver
from underway import events as ev
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
NEVER = 3600.0
"""A batch interval no worker reaches: it sends only when it stops."""


def worker(url: str, otlp: str, run_id: str | list[str], *, crash_at: str | None = None,
           crash_after: int = 1, interval: float = 0.2, recover: bool = True
           ) -> subprocess.CompletedProcess[str]:
    """Run one worker process to its end (or its SIGKILL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    if crash_at is not None:
        env.update(UNDERWAY_CRASH_AFTER=str(crash_after), UNDERWAY_CRASH_POINTS=crash_at)
    runs = [run_id] if isinstance(run_id, str) else run_id
    return subprocess.run(
        [sys.executable, str(WORKER), "--db", url, "--otlp", otlp,
         *(a for r in runs for a in ("--run", r)),
         "--interval", str(interval), *([] if recover else ["--no-recover"])],
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
    """Every attribute value of a span, as one text."""
    return json.dumps(span["attributes"])


def journal(url: str, run_id: str) -> list[Any]:
    """The run's journaled events."""
    store = connect(url)
    try:
        return [r.event for r in uw.Client(store).history(run_id)]
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_spans_of_work_journaled_before_each_kill_reach_the_receiver_once(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    run_id = start_run(url)
    with OtlpReceiver() as receiver:
        first = worker(url, receiver.url, run_id, crash_at="effect.after_run",
                       crash_after=CHARGE_RUNS, interval=NEVER, recover=False)
        assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
        assert receiver.spans == [], "the first worker sent nothing before its kill"
        killed = journal(url, run_id)
        assert any(isinstance(e, ev.ToolSucceeded) for e in killed)

        second = worker(url, receiver.url, run_id, crash_at="spans.before_send",
                        interval=NEVER, recover=False)
        assert second.returncode == -signal.SIGKILL, second.stderr[-4000:]
        assert receiver.spans == [], "the second worker was killed before it sent"

        third = worker(url, receiver.url, run_id)
        assert third.returncode == 0, third.stderr[-4000:]
        assert third.stdout.split() == ["completed"]
        spans = list(receiver.spans)

    events = journal(url, run_id)
    assert [type(e) for e in events[:len(killed)]] == [type(e) for e in killed]
    ids = [s["span_id"] for s in spans]
    assert len(ids) == len(set(ids)), "no span was sent twice"
    assert {s["trace_id"] for s in spans} == {TRACE_ID}
    by_id = {s["span_id"]: s for s in spans}
    for s in spans:
        seen, parent = [s["name"]], s["parent_id"]
        while parent != CALLER_SPAN:
            assert parent in by_id, f"{' <- '.join(seen)}: parent {parent} was never sent"
            seen.append(by_id[parent]["name"])
            parent = by_id[parent]["parent_id"]

    # Exactly one span per journaled call, named and keyed by it.
    calls = [e for e in events if isinstance(e, ev.ToolSucceeded)]
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert sorted((s["attributes"]["gen_ai.tool.name"], s["attributes"]["gen_ai.tool.call.id"])
                  for s in tools) == sorted((e.tool, e.key) for e in calls)
    models = [e for e in events if isinstance(e, ev.ModelResponded)]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert [(s["attributes"]["gen_ai.request.model"], s["kind"]) for s in chats] \
        == [(e.model, "client") for e in models]
    assert len([e for e in events if isinstance(e, ev.StepStarted)]) \
        == len([s for s in spans if s["name"].startswith("underway.step ")])
    assert len([e for e in events if isinstance(e, ev.PolicyDecided)]) \
        == len([s for s in spans if s["name"].startswith("underway.policy ")])

    names = Counter(s["name"] for s in spans)
    assert names == Counter({
        "underway.run traced_orders": 1,
        "underway.step look_up": 1,
        # the attempt the first worker died in, and the one that ended
        "underway.step charge_card": 2,
        "underway.step finish": 1,
        "underway.policy find_customer": 1,
        "execute_tool find_customer": 1,
        "underway.policy quote": 1,
        "execute_tool quote": 1,
        # decided again before the charge whose outcome the kill hid was tried again
        "underway.policy charge": 2,
        "execute_tool charge": 1,
        "chat claude-test": 1,
    }), names
    (root,) = [s for s in spans if s["name"] == "underway.run traced_orders"]
    assert root["parent_id"] == CALLER_SPAN
    assert root["attributes"]["underway.status"] == "completed"
    steps = [s for s in spans if s["name"] == "underway.step charge_card"]
    assert sorted(s["attributes"].get("underway.recovered", False) for s in steps) \
        == [False, True]
    (chat,) = chats
    assert chat["attributes"]["gen_ai.provider.name"] == "anthropic"
    assert "gen_ai.system" not in chat["attributes"]
    assert (chat["attributes"]["gen_ai.usage.input_tokens"],
            chat["attributes"]["gen_ai.usage.output_tokens"]) == (12, 7)

    # Values: only the quote's opted-in result fields, never its secret argument or token.
    (quoted,) = [s for s in spans if s["name"] == "execute_tool quote"]
    recorded = {k: v for k, v in quoted["attributes"].items()
                if k.startswith("underway.tool.")}
    assert recorded == {"underway.tool.result.invoice": INVOICE,
                        "underway.tool.result.cents": 1234}
    for s in spans:
        assert "SECRET" not in values(s), s
        assert "prompt" not in values(s) and "charged" not in values(s), s


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_a_batch_sent_before_a_kill_is_sent_again_with_the_same_ids(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    run_id = start_run(url)
    with OtlpReceiver() as receiver:
        first = worker(url, receiver.url, run_id, crash_at="spans.after_send",
                       interval=NEVER, recover=False)
        assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
        sent = list(receiver.spans)
        assert sent, "the batch went out before the kill"
        second = worker(url, receiver.url, run_id)
        assert second.returncode == 0, second.stderr[-4000:]
        again = list(receiver.spans)[len(sent):]

    # The cursor had not moved: the same spans were sent again, with the same ids, parents,
    # names, times and attributes, so a backend keeps one of each. Only the opted-in
    # arguments of a read-only call (which the journal does not hold) were known to the
    # process that made the call alone.
    def same(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(({**s, "attributes": {k: v for k, v in s["attributes"].items()
                                            if not k.startswith("underway.tool.args.")}}
                       for s in spans), key=lambda s: str(s["span_id"]))

    assert same(again) == same(sent)
    assert len({s["span_id"] for s in sent}) == len(sent)
    (quoted,) = [s for s in sent if s["name"] == "execute_tool quote"]
    assert quoted["attributes"]["underway.tool.args.invoice"] == INVOICE


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_many_runs_through_repeated_kills_lose_no_span(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Ten runs, workers killed again and again right after a tool ran (while batches go
    out every 0.2 s), then a worker that finishes them: every journaled call, model call,
    step attempt and run has its span in the receiver, and copies share their id."""
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    run_ids = [start_run(url) for _ in range(10)]
    kills = 0
    with OtlpReceiver() as receiver:
        for after in (4, 7, 5, 9, 6, 11):
            done = worker(url, receiver.url, run_ids, crash_at="effect.after_run",
                          crash_after=after)
            if done.returncode == 0:
                break
            assert done.returncode == -signal.SIGKILL, done.stderr[-4000:]
            kills += 1
        last = worker(url, receiver.url, run_ids)
        assert last.returncode == 0, last.stderr[-4000:]
        assert last.stdout.split() == ["completed"] * len(run_ids)
        spans = list(receiver.spans)
    assert kills >= 3, "the workers were killed mid-way several times"

    by_id: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        by_id.setdefault(s["span_id"], []).append(s)
    for copies in by_id.values():
        assert len({(c["name"], c["parent_id"], c["start"], c["end"]) for c in copies}) == 1
    unique = [copies[0] for copies in by_id.values()]
    for run_id in run_ids:
        events = journal(url, run_id)
        mine = [s for s in unique if s["attributes"].get("underway.run_id") == run_id
                or s["parent_id"] in {x["span_id"] for x in unique
                                      if x["attributes"].get("underway.run_id") == run_id
                                      and x["name"].startswith("underway.step ")}]
        calls = sorted(e.key for e in events if isinstance(e, ev.ToolSucceeded))
        assert sorted(s["attributes"]["gen_ai.tool.call.id"] for s in mine
                      if s["name"].startswith("execute_tool ")) == calls, run_id
        assert len([s for s in mine if s["name"].startswith("chat ")]) \
            == len([e for e in events if isinstance(e, ev.ModelResponded)]), run_id
        assert len([s for s in mine if s["name"].startswith("underway.step ")]) \
            == len([e for e in events if isinstance(e, ev.StepStarted)]), run_id
        assert len([s for s in mine if s["name"] == "underway.run traced_orders"]) == 1
    assert {s["trace_id"] for s in unique} == {TRACE_ID}
