"""Retries on durable timers, retry budgets, circuit breakers and deadlines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.engine import Engine
from underway.retry import CircuitBreaker, RetryPolicy
from underway.testing import ManualClock, memory_engine


class S(BaseModel):
    n: int = 0


class Flaky(Exception):
    """A transient outside failure."""


class Refused(Exception):
    """A permanent outside failure."""


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def history(engine: Engine, run_id: str) -> list[ev.Event]:
    return [r.event for r in engine.journal.history("default", run_id)]


def failing_tool(fail_times: int, keys: list[str], *, policy: RetryPolicy | None,
                 error: type[Exception] = Flaky) -> uw.Tool:
    async def post(args: Any, info: uw.CallInfo) -> Any:
        keys.append(info.key)
        if len(keys) <= fail_times:
            raise error(f"attempt {len(keys)} failed")
        return {"posted": True}

    return uw.tool(post, name="post_invoice", retry=policy)


def one_call_flow(t: uw.Tool, name: str = "retrying") -> uw.Flow[S, Any]:
    flow = uw.Flow(name, state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.call(t, {"invoice": 7}))

    return flow


def test_a_retry_sequence_follows_the_policy_and_waits_on_durable_timers() -> None:
    keys: list[str] = []
    policy = RetryPolicy(max_attempts=4, initial_interval=10, backoff=2, max_interval=15,
                         jitter=False)
    flow = one_call_flow(failing_tool(2, keys, policy=policy))
    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    runner = uw.Runner(engine)

    run(runner.run_until_idle())
    s = engine.state(run_id)
    assert (s.status, s.wake_at) == ("waiting", clock.now() + 10)  # holds no worker
    clock.advance(9)
    assert run(runner.run_until_idle()) == 0
    clock.advance(1)
    run(runner.run_until_idle())
    assert engine.state(run_id).wake_at == clock.now() + 15  # 10 * 2, capped at 15
    clock.advance(15)
    final = run(runner.run_until_complete(run_id))
    assert final.result == {"posted": True}
    assert keys == [keys[0]] * 3  # every attempt carries the same idempotency key
    scheduled = [e for e in history(engine, run_id) if isinstance(e, ev.RetryScheduled)]
    assert [(e.attempt, e.delay_s) for e in scheduled] == [(2, 10.0), (3, 15.0)]
    assert final.retries == 2


def test_full_jitter_stays_within_the_backoff_bound() -> None:
    policy = RetryPolicy(max_attempts=6, initial_interval=4, backoff=3, max_interval=100)
    for attempt, bound in [(2, 4), (3, 12), (4, 36), (5, 100), (6, 100)]:
        for rnd in (0.0, 0.5, 0.999):
            assert 0 <= policy.delay(attempt, rnd) <= bound
        assert policy.delay(attempt, 0.5) == pytest.approx(bound * 0.5)


def test_exhausted_attempts_reach_the_step_and_non_retryable_errors_are_not_retried() -> None:
    keys: list[str] = []
    policy = RetryPolicy(max_attempts=2, initial_interval=1, jitter=False,
                         non_retryable=("Refused",))
    flaky = failing_tool(5, keys, policy=policy)
    refused_keys: list[str] = []
    refused = failing_tool(5, refused_keys, policy=policy, error=Refused)
    flow = uw.Flow("handles", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        outcomes = []
        for t in (flaky, refused):
            try:
                await ctx.call(t, {})
            except uw.ToolCallError as exc:
                outcomes.append(exc.error_type)
        return ctx.done(outcomes)

    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    runner = uw.Runner(engine)
    run(runner.run_until_idle())
    clock.advance(2)
    final = run(runner.run_until_complete(run_id))
    assert final.result == ["Flaky", "Refused"]
    assert len(keys) == 2 and len(refused_keys) == 1


def test_an_exhausted_retry_budget_stops_the_run_dead() -> None:
    keys: list[str] = []
    policy = RetryPolicy(max_attempts=10, initial_interval=1, jitter=False)
    flow = one_call_flow(failing_tool(100, keys, policy=policy))
    engine, clock = memory_engine([flow])
    engine.retry_budget = 3
    run_id, _ = engine.start(flow)
    runner = uw.Runner(engine)
    for _ in range(6):
        run(runner.run_until_idle())
        clock.advance(5)
    s = engine.state(run_id)
    assert s.status == "dead"
    assert "retry budget of 3" in str(s.error)
    assert len(keys) == 4  # the first attempt and three retries


def test_a_circuit_opens_fails_fast_and_closes_after_a_good_trial() -> None:
    calls: list[str] = []
    healthy = [False]

    async def ping(args: Any, info: uw.CallInfo) -> Any:
        calls.append(info.run_id)
        if not healthy[0]:
            raise Flaky("gateway down")
        return "pong"

    gateway = uw.tool(ping, name="gateway", circuit=CircuitBreaker(failure_threshold=2,
                                                                   cooldown=60))
    flow = uw.Flow("circuit", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            return ctx.done(await ctx.call(gateway, {}))
        except uw.ToolCallError as exc:
            return ctx.done(exc.error_type)

    engine, clock = memory_engine([flow])
    runner = uw.Runner(engine)

    def one() -> Any:
        run_id, _ = engine.start(flow)
        return run(runner.run_until_complete(run_id)).result

    assert [one(), one()] == ["Flaky", "Flaky"]  # two consecutive failures open it
    assert one() == "CircuitOpen"  # fails fast: the gateway is not called
    assert len(calls) == 2
    clock.advance(61)
    assert one() == "Flaky"  # the half-open trial fails: open again
    assert one() == "CircuitOpen"
    clock.advance(61)
    healthy[0] = True
    assert one() == "pong"  # a good trial closes it
    assert one() == "pong"
    assert len(calls) == 5


def test_a_deadline_escalates_a_waiting_run_which_then_waits_on() -> None:
    flow = uw.Flow("deadline", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.wait("approval", then=act)

    @flow.step
    async def act(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(ctx.signal)

    clock = ManualClock(1_700_000_000.0)
    engine, clock = memory_engine([flow], start=clock.now())
    run_id, _ = engine.start(flow, deadline=clock.now() + 3600)
    runner = uw.Runner(engine)
    run(runner.run_until_idle())
    row = engine.store.get_run("default", run_id)
    assert row is not None and row.next_wake_at == clock.now() + 3600  # wakes for the deadline
    clock.advance(3601)
    run(runner.run_until_idle())
    s = engine.state(run_id)
    assert s.status == "escalated" and "deadline" in str(s.escalation)
    engine.resolve(run_id, resolution="retry", by="lead@acme")
    run(runner.run_until_idle())
    assert engine.state(run_id).status == "waiting"  # back to waiting, not re-escalated
    engine.signal(run_id, "approval", {"ok": True})
    assert run(runner.run_until_complete(run_id)).result == {"ok": True}


def test_a_database_failure_inside_a_step_hands_the_run_back_instead_of_killing_it() -> None:
    """A store that fails while a step commits an intent (a server restarting) ends the
    activation; the run is not dead-lettered, even when step code catches everything, and
    the next activation finishes it."""
    calls: list[str] = []

    async def post(args: Any, info: uw.CallInfo) -> Any:
        calls.append(info.key)
        return {"ok": True}

    t = uw.tool(post, name="post", idempotent=True)
    flow = uw.Flow("swallowing", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            return ctx.done(await ctx.call(t, {}))
        except Exception:  # careless step code must not turn an outage into a dead run
            return ctx.fail("gave up")

    engine, _ = memory_engine([flow])
    real_append = engine.store.append
    failures = [1]

    def flaky_append(batch: Any) -> bool:
        if failures and any(e.type == "ToolStarted" for e in batch.events):
            failures.pop()
            raise ConnectionError("server closed the connection unexpectedly")
        return real_append(batch)

    engine.store.append = flaky_append  # type: ignore[method-assign]
    run_id, _ = engine.start(flow)
    lease = engine.claim(run_id=run_id)[0]
    with pytest.raises(ConnectionError):
        run(engine.activate(lease))
    assert engine.store.get_run("default", run_id).status == "ready" and calls == []
    engine.store.release(lease)
    s = run(uw.Runner(engine).run_until_complete(run_id))
    assert s.status == "completed" and len(calls) == 1
