"""``evaluate``: every figure counts what real runs journaled — how they ended and how fast,
who stepped in, what the guard stopped, the takeover after a crash and how its lost send
was settled, cost — on memory, SQLite and PostgreSQL; and the detectors of what the
runtime never does (an effect twice, a denied call run anyway) fire on journals forged to
show it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import underway as uw
from fakes.eval_flows import COST, TOKENS_IN, TOKENS_OUT, Crash, approver, decide, desk
from fakes.seeded_journals import Seeder
from underway import events as ev
from underway.clock import ManualClock
from underway.crypto import KeyringFile, encrypt
from underway.errors import ConfigurationError
from underway.guard import Guard
from underway.journal import Journal
from underway.ops.evaluation import EVAL_KINDS, evaluate
from underway.privacy.retention import Rule, prepare
from underway.store import Store

T0 = 1_800_000_000.0
DAY = 86_400.0


def world(store: Store) -> tuple[uw.Engine, ManualClock]:
    clock = ManualClock(T0)
    return uw.Engine(store, flows=[desk], clock=clock), clock


def drive(engine: uw.Engine) -> None:
    asyncio.run(uw.Runner(engine).run_until_idle())


def start(engine: uw.Engine, name: str, **ticket: Any) -> str:
    run_id, _ = engine.start(desk, {"name": name, **ticket})
    return run_id


def test_outcomes_completion_and_time_to_resolution(store: Store) -> None:
    engine, clock = world(store)
    done = start(engine, "done")
    clock.advance(60)
    drive(engine)  # ends 60 s after it started
    failed = start(engine, "failed", end="fail")
    clock.advance(120)
    drive(engine)
    start(engine, "dead", end="dead")
    start(engine, "waiting", end="wait")
    drive(engine)
    cancelled = start(engine, "cancelled", end="wait")
    drive(engine)
    clock.advance(300)
    engine.cancel(cancelled, by="ops")
    drive(engine)

    found = evaluate(store)
    o = found.outcomes
    assert (o.started, o.completed, o.failed, o.dead, o.cancelled, o.open) == (5, 1, 1, 1, 1, 1)
    assert o.completion_rate == pytest.approx(0.2)
    assert found.resolution_s.n == 3  # the dead and the waiting runs have not ended
    assert (found.resolution_s.p50, found.resolution_s.max) == (120.0, 300.0)
    assert found.recovery.dead_lettered == 1
    assert found.takeover.decided_by == {"ops": {"cancelled the run": 1}}
    assert [f.flow for f in found.flows] == ["desk"]
    assert found.flows[0].outcomes == o
    assert found.started_per_day == {"2027-01-15": {
        "cancelled": 1, "completed": 1, "dead": 1, "failed": 1, "open": 1}}
    assert found.reading.runs == 5 and found.reading.unreadable == ()
    assert {engine.state(r).status for r in (done, failed)} == {"completed", "failed"}


def test_people_who_stepped_in_what_they_decided_and_how_long_it_took(store: Store) -> None:
    engine, clock = world(store)
    fin = approver(engine, "fin", now=T0 - 1)
    kim = approver(engine, "kim", now=T0 - 1)
    held = start(engine, "held", untrusted=True, refund=900)
    rejected = start(engine, "rejected", refund=5000)
    start(engine, "quiet")
    drive(engine)
    clock.advance(600)
    decide(engine, held, fin, "fin", "approve")  # the untrusted post
    drive(engine)
    clock.advance(300)
    decide(engine, held, fin, "fin", "approve")  # the refund of 900
    decide(engine, rejected, kim, "kim", "reject")
    drive(engine)

    found = evaluate(store)
    t = found.takeover
    assert found.outcomes.completed == 3
    assert (t.runs, t.approvals_requested, t.approvals_granted, t.approvals_rejected) == (
        2, 3, 2, 1)
    assert t.rate == pytest.approx(2 / 3) and t.approvals_per_run == pytest.approx(1.0)
    assert t.decided_by == {"fin": {"granted an approval": 2},
                            "kim": {"rejected an approval": 1}}
    # The post waited 600 s, the refund of 900 asked after it 300 s, the rejected 900 s.
    assert (t.approval_wait_s.n, t.approval_wait_s.p50, t.approval_wait_s.max) == (
        3, 600.0, 900.0)
    s = found.safety
    assert (s.taint_holds, s.executed_unsafe, s.attempts) == (1, 0, 1)
    assert found.cost.money == {"INR": 900.0}
    assert found.cost.money_per_completed == {"INR": 300.0}
    refund = next(u for u in found.tools if u.tool == "refund")
    assert (refund.held, refund.succeeded, refund.executed_unsafe) == (2, 1, 0)


def test_the_guard_stops_a_denied_call_and_nothing_unsafe_runs(store: Store) -> None:
    engine, _ = world(store)
    start(engine, "wire", wire=True)
    start(engine, "plain")
    drive(engine)
    found = evaluate(store)
    s = found.safety
    assert s.denials == {"no-wires": 1} and s.refusals == {"policy_denied": 1}
    assert (s.attempts, s.shadowed, s.taint_holds, s.executed_unsafe) == (1, 0, 0, 0)
    wire = next(u for u in found.tools if u.tool == "wire")
    assert (wire.denied, wire.refused, wire.succeeded) == (1, 1, 0)
    assert found.outcomes.completed == 2


def test_shadow_mode_counts_every_mutating_call_it_held_back(store: Store) -> None:
    clock = ManualClock(T0)
    engine = uw.Engine(store, flows=[desk], clock=clock, guard=Guard(shadow=True))
    start(engine, "shadow", refund=0)
    drive(engine)
    found = evaluate(store)
    assert found.safety.shadowed == 1  # the send; the lookup reads
    assert found.safety.executed_unsafe == 0
    assert found.effects.mutating_keys == 0


def test_a_crash_is_taken_over_and_its_lost_send_settled_by_its_key(store: Store) -> None:
    engine, clock = world(store)
    run_id = start(engine, "crash", crash=True)
    with pytest.raises(Crash):
        drive(engine)
    clock.advance(engine.lease_ttl + 1)
    drive(engine)

    found = evaluate(store)
    r = found.recovery
    assert found.outcomes.completed == 1
    assert (r.takeovers, r.runs_taken_over) == (1, 1)
    assert r.gap_s.p50 == engine.lease_ttl + 1
    assert found.effects.unknown_outcomes == {"takeover": 1}
    assert found.effects.settled == {"rerun": 1}
    assert found.effects.duplicates == [] and found.effects.mutating_keys == 1
    assert found.flows[0].takeovers == 1
    send = next(u for u in found.tools if u.tool == "send")
    assert (send.succeeded, send.duplicates) == (1, 0)
    assert engine.state(run_id).status == "completed"


def test_cost_tokens_and_latency_per_completed_run(store: Store) -> None:
    engine, _ = world(store)
    for name in ("a", "b", "c"):
        start(engine, name)
    start(engine, "d", end="fail")
    drive(engine)
    c = evaluate(store).cost
    assert (c.model_calls, c.tokens_in, c.tokens_out) == (4, 4 * TOKENS_IN, 4 * TOKENS_OUT)
    assert c.model_cost_usd == pytest.approx(4 * COST)
    assert c.cost_per_completed_usd == pytest.approx(4 * COST / 3)
    assert c.tokens_per_completed == pytest.approx(4 * (TOKENS_IN + TOKENS_OUT) / 3)
    assert c.model_latency_ms.n == 4 and c.tool_latency_ms.n == 8


def test_the_window_and_the_flow_choose_the_runs_and_when_they_are_judged(
        store: Store) -> None:
    engine, clock = world(store)
    fin = approver(engine, "fin", now=T0 - 1)
    start(engine, "before")
    drive(engine)
    clock.advance(DAY)
    held = start(engine, "held", refund=700)
    drive(engine)
    clock.advance(7200)  # decided two hours on: outside a window of one hour
    decide(engine, held, fin, "fin", "approve")
    drive(engine)

    window = evaluate(store, since=T0 + DAY, until=T0 + DAY + 3600)
    assert window.outcomes.started == 1 and window.outcomes.open == 1
    assert window.takeover.approvals_granted == 0 and window.cost.money == {}
    later = evaluate(store, since=T0 + DAY)
    assert later.outcomes.completed == 1 and later.cost.money == {"INR": 700.0}
    assert evaluate(store).outcomes.started == 2
    assert evaluate(store, flow="another").outcomes.started == 0


def test_reading_opens_events_without_their_large_values(store: Store) -> None:
    seeder = Seeder(store)
    prompt = "x" * 50_000
    seeder.write("big", [
        (T0, ev.RunStarted(flow="agent", input={"document": prompt}, state={},
                           first_step="act")),
        (T0 + 1, ev.StepStarted(step="act")),
        (T0 + 1, ev.ModelResponded(key="big:0:act:0", index=0, model="m",
                                   request={"messages": [prompt, prompt + "y"]},
                                   response={"text": prompt}, tokens_in=30_000,
                                   tokens_out=10, cost_usd=0.1, latency_ms=900.0)),
        (T0 + 1, ev.StepCompleted(step="act", next=None, patch=[
            {"op": "add", "path": "/notes", "value": prompt}])),
        (T0 + 2, ev.RunCompleted(result={"summary": prompt})),
    ])
    found = evaluate(store)
    assert found.cost.tokens_in == 30_000 and found.outcomes.completed == 1
    r = found.reading
    assert (r.runs, r.events, r.blobs) == (1, 4, 0)  # the step's end is not read
    assert r.payload_bytes < 4_000  # the document, prompt and answer stay in their blobs
    assert r.kinds == EVAL_KINDS


def test_an_effect_run_twice_or_a_denied_call_run_anyway_would_be_seen(store: Store) -> None:
    """The runtime never writes these journals; forged, they show the detectors fire."""
    seeder = Seeder(store)
    key = "twice:0:act:0"
    call = {"key": key, "tool": "charge", "index": 0}
    seeder.write("twice", [
        (T0, ev.RunStarted(flow="agent", input={}, state={}, first_step="act")),
        (T0 + 1, ev.StepStarted(step="act")),
        (T0 + 1, ev.ToolStarted(**call, args={}, args_hash="h")),
        (T0 + 2, ev.ToolSucceeded(**call, args_hash="h", result={}, latency_ms=5.0,
                                  counts={"money.INR": 100.0})),
        (T0 + 3, ev.ToolSucceeded(**call, args_hash="h", result={}, reconciled=True,
                                  counts={"money.INR": 100.0})),
        (T0 + 4, ev.RunCompleted(result={})),
    ])
    denied = {"key": "denied:0:act:0", "tool": "wire", "index": 0}
    held = {"key": "denied:0:act:1", "tool": "refund", "index": 1}
    seeder.write("denied", [
        (T0, ev.RunStarted(flow="agent", input={}, state={}, first_step="act")),
        (T0 + 1, ev.StepStarted(step="act")),
        (T0 + 1, ev.PolicyDecided(**denied, args_hash="h", decision="deny",
                                  rule_id="no-wires", policy_version="v1")),
        (T0 + 1, ev.ToolStarted(**denied, args={}, args_hash="h")),
        (T0 + 2, ev.ToolSucceeded(**denied, args_hash="h", result={})),
        (T0 + 2, ev.PolicyDecided(**held, args_hash="h", decision="require_approval",
                                  rule_id="refunds", policy_version="v1")),
        (T0 + 2, ev.ToolSucceeded(**held, args_hash="h", result={})),
        (T0 + 3, ev.RunCompleted(result={})),
    ])
    found = evaluate(store)
    assert [(d.run_id, d.key, d.times) for d in found.effects.duplicates] == [
        ("twice", key, 2)]
    assert found.cost.money == {"INR": 200.0}
    assert [(u.run_id, u.tool) for u in found.safety.unsafe_calls] == [
        ("denied", "wire"), ("denied", "refund")]
    assert found.safety.executed_unsafe == 2
    assert {f.flow: f.executed_unsafe for f in found.flows} == {"agent": 2}


def test_purged_runs_count_from_the_skeletons_retention_kept(store: Store) -> None:
    engine, clock = world(store)
    fin = approver(engine, "fin", now=T0 - 1)
    crashed = start(engine, "crash", crash=True)
    with pytest.raises(Crash):
        drive(engine)
    clock.advance(engine.lease_ttl + 1)
    held = start(engine, "held", refund=400, wire=True)
    drive(engine)
    decide(engine, held, fin, "fin", "approve")
    drive(engine)
    before = evaluate(store)

    journal = Journal(store)
    for run_id in (crashed, held):
        row = store.get_run("default", run_id)
        assert row is not None
        store.purge_run(prepare(journal, row, Rule(0.0, "test"), sweep_id="s1",
                                at=clock.now()))
    after = evaluate(store)
    assert after.reading.unreadable == ()
    assert after.outcomes == before.outcomes and after.cost == before.cost
    assert after.recovery == before.recovery and after.effects == before.effects
    assert after.safety.denials == before.safety.denials == {"no-wires": 1}
    # A skeleton keeps no one's identity: the decision is counted, not who made it.
    assert after.takeover.approvals_granted == before.takeover.approvals_granted == 1
    assert before.takeover.decided_by == {"fin": {"granted an approval": 1}}
    assert after.takeover.decided_by == {"?": {"granted an approval": 1}}


def test_journals_no_key_here_opens_are_named_and_left_out(
        store: Store, tmp_path: Any) -> None:
    keyring = tmp_path / "keyring.json"
    KeyringFile.create(keyring)
    encrypt(store, KeyringFile(keyring))
    engine, _ = world(store)
    sealed = start(engine, "sealed")
    drive(engine)
    store.codec.sealer = None  # as a reader without the keyring sees the database
    found = evaluate(store)
    assert found.reading.unreadable == (sealed,)
    assert found.outcomes.started == 0


@pytest.mark.parametrize(("since", "until", "message"), [
    (float("nan"), None, "since must be a time"),
    (None, float("inf"), "until must be a time"),
    (T0, T0, "the window is empty"),
])
def test_a_bad_window_is_refused(store: Store, since: float | None, until: float | None,
                                 message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        evaluate(store, since=since, until=until)
