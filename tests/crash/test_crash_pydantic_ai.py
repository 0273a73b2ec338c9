"""Durable pydantic-ai agents killed with SIGKILL mid-run, on SQLite and PostgreSQL.

Child processes (``pydantic_ai_worker.py``) drive a batch of runs of an unmodified
pydantic-ai agent whose ``OpenAIChatModel`` talks to a local Chat Completions server in this
process, and whose refund tool posts to the outside service here. Each child is killed:
at the edge of an effect (the refund reached the service, its outcome is not journaled),
or from outside once the model server has answered two more requests (others are then in
flight). Fresh children take over until every run is final.

What is checked: every run completes with the agent's output; no refund reaches the
outside world twice; one whose outcome a kill hid is reconciled, not repeated, or, when
its tool has no reconcile hook, escalated to an operator who settles it; no
model request whose response was journaled is sent again (a request can be repeated only
when a kill caught it in flight); each run's journal holds each response once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fakes.model_provider import FakeProvider, Reply, openai_completion
from fakes.outside_service import OutsideService
from underway import Engine, connect
from underway import events as ev

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

WORKER = Path(__file__).with_name("pydantic_ai_worker.py")
RUNS = 4
TENANTS = ("outside", "edge", "operator")
"""Batches: killed from outside; killed at an effect's edge and reconciled; killed at an
effect's edge with no reconcile hook, and settled by an operator."""
CHILD_TIMEOUT_S = 120.0
OUTSIDE_KILLS = 3
"""Kills from outside in the middle of a batch, besides the one at the edge of an effect."""
MODEL_LATENCY_S = 0.15
"""How long the local model server takes to answer, as a provider does: kills find
requests in flight."""


def answer(body: Any) -> Reply:
    """The model's answer to a conversation: look the order up, refund it, say so. It
    depends on the conversation alone, so a request sent again gets the same answer."""
    time.sleep(MODEL_LATENCY_S)  # the server's thread, as a provider's latency
    prompt = json.dumps(body["messages"])
    found = re.search(r"order-(\d+)", prompt)
    assert found is not None, prompt
    i = int(found.group(1))
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done == 0:
        return openai_completion(tool_calls=[(f"call-{i}-0", "order_status",
                                              json.dumps({"order": f"order-{i}"}))],
                                 finish_reason="tool_calls")
    if done == 1:
        return openai_completion(tool_calls=[(f"call-{i}-1", "send_refund", json.dumps(
            {"order": f"order-{i}", "cents": 100 * (i + 1)}))], finish_reason="tool_calls")
    return openai_completion(content=f"Refunded order-{i}.")


def turns(server: FakeProvider) -> int:
    """How many distinct model requests the server has answered."""
    return len({turn_of(r.body) for r in server.received})


def turn_of(body: Any) -> tuple[str, int, int]:
    """(tenant, run index, how many tool results the conversation held): one request."""
    found = re.search(r"order-(\d+) of (\w+)", json.dumps(body["messages"]))
    assert found is not None
    return (found.group(2), int(found.group(1)),
            sum(1 for m in body["messages"] if m["role"] == "tool"))


def settle(engine: Engine, svc: OutsideService) -> int:
    """Act as the operator: resolve each escalated run of ``operator`` from what the
    outside service says of the refund's key. How many were escalated."""
    rows = engine.store.list_runs("operator", status="escalated")
    for row in rows:
        esc = engine.state(row.run_id, tenant_id="operator").escalation
        assert esc is not None and esc.tool == "send_refund" and isinstance(esc.key, str)
        seen = svc.ledger.snapshot().get(esc.key)
        if seen is None:
            engine.resolve(row.run_id, resolution="retry", by="operator", tenant_id="operator")
        else:
            engine.resolve(row.run_id, resolution="succeeded", by="operator",
                           result=f"refund {seen.result['id']} sent", tenant_id="operator")
    engine.store.close()
    return len(rows)


def child(url: str, model: FakeProvider, service: str, tenant: str, *,
          kill_after_requests: int | None = None, crash_at_effect: bool = False,
          reconcile: bool = True, ends: frozenset[str] = frozenset({"completed"})) -> bool:
    """Run one worker; True when it was killed: from outside once the model server has
    answered ``kill_after_requests`` more distinct requests, or at the edge of its batch's
    last effect."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_at_effect:
        # The batch's last effect is a refund (each run's lookup comes before its refund).
        env["UNDERWAY_CRASH_AFTER"] = str(2 * RUNS)
        env["UNDERWAY_CRASH_POINTS"] = "effect.after_run"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "--db", url, "--model", model.origin, "--service",
         service, "--tenant", tenant, "--runs", str(RUNS),
         *([] if reconcile else ["--no-reconcile"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if kill_after_requests is not None:
        target = turns(model) + kill_after_requests
        while proc.poll() is None and turns(model) < target:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"worker hung:\n{err.decode(errors='replace')[-4000:]}")
    if proc.returncode == -signal.SIGKILL:
        return True
    assert proc.returncode == 0, err.decode(errors="replace")[-4000:]
    statuses = json.loads(out.decode().strip().splitlines()[-1])["statuses"]
    assert set(statuses.values()) <= ends, statuses
    return False


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
def test_sigkill_mid_run_repeats_no_model_request_and_no_effect(
    backend: str, request: pytest.FixtureRequest,
) -> None:
    url: str = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    with FakeProvider(answer=answer) as server, OutsideService() as svc:
        # A kill at the edge of an effect: the refund reached the service, the journal
        # does not know.
        assert child(url, server, svc.url, "edge", crash_at_effect=True)
        # Kills from outside in the middle of a batch: each child dies once the model
        # server has answered two more of the batch's requests (others are in flight).
        kills = 1
        for _ in range(OUTSIDE_KILLS):
            assert child(url, server, svc.url, "outside", kill_after_requests=2)
            kills += 1
        assert turns(server) < len(TENANTS) * RUNS * 3, "kills came after the work was done"
        for tenant in ("outside", "edge"):
            assert not child(url, server, svc.url, tenant)
        # A refund tool without a reconcile hook: the outcome the kill hid is not
        # guessed. The run escalates, an operator asks the service and resolves it.
        assert child(url, server, svc.url, "operator", crash_at_effect=True, reconcile=False)
        kills += 1
        assert not child(url, server, svc.url, "operator", reconcile=False,
                         ends=frozenset({"completed", "escalated"}))
        escalated = settle(Engine(connect(url), flows=[]), svc)
        assert escalated >= 1
        assert not child(url, server, svc.url, "operator", reconcile=False)
        received = [r.body for r in server.received]
        effects = svc.ledger.snapshot()

    refunds = [d for d in effects.values() if d.kind == "refund"]
    assert sorted(d.payload["order"] for d in refunds) == sorted(
        f"order-{i}" for i in range(RUNS) for _ in TENANTS)
    assert all(d.deliveries == 1 for d in refunds), refunds

    engine = Engine(connect(url), flows=[])
    reconciled = 0
    journaled: Counter[tuple[str, int, int]] = Counter()
    for tenant in TENANTS:
        rows = engine.store.list_runs(tenant)
        assert len(rows) == RUNS
        for row in rows:
            state = engine.client.state(row.run_id, tenant_id=tenant)
            i = int(re.findall(r"order-(\d+)", state.input["prompt"])[0])
            assert state.status == "completed"
            assert state.result == f"Refunded order-{i}."
            events = [e.event for e in engine.client.events(row.run_id, tenant_id=tenant)]
            responded = [e for e in events if isinstance(e, ev.ModelResponded)]
            assert len(responded) == 3
            for r in responded:
                journaled[turn_of({"messages": _wire(r.request)})] += 1
            if tenant == "operator":
                # Escalated, not run again; the operator's resolution is its result.
                [esc] = [e for e in events if isinstance(e, ev.Escalated)]
                assert (esc.tool, esc.cause) == ("send_refund", "unknown_outcome")
                [settled] = [e for e in events if isinstance(e, ev.EscalationResolved)]
                assert settled.resolution == "succeeded" and settled.key == esc.key
                continue
            sent = [e for e in events
                    if isinstance(e, ev.ToolSucceeded) and e.tool == "send_refund"]
            assert len(sent) == 1
            reconciled += sent[0].reconciled
    assert reconciled >= 1, "the kill at the effect's edge left an outcome to reconcile"
    assert all(n == 1 for n in journaled.values())

    # A request is sent again only when a kill caught it in flight: at most one per run
    # in flight per kill.
    asked = Counter(turn_of(b) for b in received)
    assert set(asked) == set(journaled)
    repeated = sum(asked.values()) - len(TENANTS) * RUNS * 3
    assert 0 <= repeated <= kills * RUNS, asked


def _wire(request: Any) -> list[dict[str, Any]]:
    """The journaled pydantic-ai request's messages in the wire's terms (a role per tool
    return), enough for :func:`turn_of`."""
    out: list[dict[str, Any]] = []
    for m in request["messages"]:
        for p in m["parts"]:
            kind = p.get("part_kind")
            role = {"tool-return": "tool", "user-prompt": "user"}.get(kind, "other")
            out.append({"role": role, "content": p.get("content")})
    return out
