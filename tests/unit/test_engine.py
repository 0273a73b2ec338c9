"""Engine behaviour on the in-memory store: steps, effects, recovery, signals, fencing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.effects import FENCE_STRIDE
from underway.engine import Engine
from underway.errors import ConfigurationError, FencedError
from underway.journal.state import RunState
from underway.testing import ScriptedModel, memory_engine

PATIENCE_S = 120.0
"""Guards a wait against a hang; something that never comes fails the test only then."""


class Crash(BaseException):
    """Raised to abandon an activation mid-flight, as a SIGKILL would."""


class Counter(BaseModel):
    n: int = 0
    seen: list[Any] = []


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def types(engine: Engine, run_id: str) -> list[str]:
    return [type(r.event).__name__ for r in engine.journal.history("default", run_id)]


def start_and_crash(flow: uw.Flow[Any, Any]) -> tuple[Engine, str]:
    """Start a run whose first activation dies (``Crash``), then let the dead holder's
    lease expire so a fresh activation may take the run."""
    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    with pytest.raises(Crash):
        run(uw.Runner(engine).run_until_idle())
    clock.advance(engine.lease_ttl + 1)
    return engine, run_id


async def drive(engine: Engine, run_id: str) -> RunState:
    return await uw.Runner(engine).run_until_complete(run_id)


def test_steps_timers_and_signals_run_to_completion() -> None:
    flow = uw.Flow("basic", state=Counter)

    @flow.step
    async def first(ctx: uw.RunContext[Counter, Any]) -> Any:
        ctx.state.n += 1
        return ctx.sleep(60, then=second)

    @flow.step
    async def second(ctx: uw.RunContext[Counter, Any]) -> Any:
        return ctx.wait("approved", timeout=600, then=third)

    @flow.step
    async def third(ctx: uw.RunContext[Counter, Any]) -> Any:
        ctx.state.seen.append(ctx.signal)
        return ctx.done({"n": ctx.state.n, "signal": ctx.signal, "timed_out": ctx.timed_out})

    engine, clock = memory_engine([flow])
    run_id, created = engine.start(flow)
    assert created
    runner = uw.Runner(engine)
    run(runner.run_until_idle())
    s = engine.state(run_id)
    assert (s.status, s.wake_at) == ("waiting", clock.now() + 60)
    clock.advance(30)
    assert run(runner.run_until_idle()) == 0  # timer not due: nothing runs
    clock.advance(31)
    run(runner.run_until_idle())
    assert engine.state(run_id).waiting_signal == "approved"
    engine.signal(run_id, "approved", {"by": "asha"})
    final = run(drive(engine, run_id))
    assert final.status == "completed"
    assert final.result == {"n": 1, "signal": {"by": "asha"}, "timed_out": False}
    assert final.state == {"n": 1, "seen": [{"by": "asha"}]}
    assert engine.journal.verify("default", run_id).ok


def test_wait_times_out_and_signal_sent_early_is_kept() -> None:
    flow = uw.Flow("waits", state=Counter)

    @flow.step
    async def a(ctx: Any) -> Any:
        return ctx.wait("never", timeout=10, then=b)

    @flow.step
    async def b(ctx: Any) -> Any:
        ctx.state.seen.append(ctx.timed_out)
        return ctx.wait("early", then=c)

    @flow.step
    async def c(ctx: Any) -> Any:
        return ctx.done(ctx.signal)

    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    engine.signal(run_id, "early", 7)  # before the run waits for it
    run(uw.Runner(engine).run_until_idle())
    clock.advance(11)
    final = run(drive(engine, run_id))
    assert final.status == "completed"
    assert final.result == 7
    assert final.state["seen"] == [True]


def test_same_idempotency_key_starts_one_run() -> None:
    flow = uw.Flow("once", state=Counter)

    @flow.step
    async def only(ctx: Any) -> Any:
        return ctx.done()

    engine, _ = memory_engine([flow])
    a, created_a = engine.start(flow, idempotency_key="order-17")
    b, created_b = engine.start(flow, idempotency_key="order-17")
    c, _ = engine.start(flow, idempotency_key="order-17", tenant_id="other")
    assert a == b and created_a and not created_b
    assert c != a


def test_invalid_input_names_the_field() -> None:
    class In(BaseModel):
        amount: int

    flow = uw.Flow("typed", state=Counter, input=In)

    @flow.step
    async def only(ctx: Any) -> Any:
        return ctx.done()

    engine, _ = memory_engine([flow])
    with pytest.raises(ConfigurationError, match="amount"):
        engine.start(flow, {"amount": "lots"})
    assert engine.store.tenants() == []


def test_completed_calls_are_not_repeated_after_a_crash() -> None:
    calls: list[str] = []

    @uw.tool(mutating=False)
    async def lookup(args: Any) -> Any:
        calls.append("lookup")
        return {"v": 41}

    @uw.tool
    async def send(args: Any, info: uw.CallInfo) -> Any:
        calls.append(f"send:{info.key}")
        return {"sent": args["to"]}

    crashed = []
    flow = uw.Flow("memo", state=Counter)

    @flow.step
    async def work(ctx: Any) -> Any:
        v = await ctx.call(lookup, {})
        r = await ctx.call(send, {"to": "ravi"})
        await ctx.call(send, {"to": "meera"})
        if not crashed:
            crashed.append(True)
            raise Crash
        ctx.state.n = v["v"] + 1
        return ctx.done(r)

    engine, run_id = start_and_crash(flow)
    state = run(drive(engine, run_id))
    # The first send's outcome was committed with the second's intent; the second send's
    # outcome died with the crash, so the engine escalates instead of sending again.
    assert state.status == "escalated"
    sends = [f"send:{run_id}:0:work:1", f"send:{run_id}:0:work:2"]
    assert calls == ["lookup", *sends]  # the lookup's result was journaled with send #1's intent
    engine.resolve(run_id, resolution="succeeded", result={"sent": "meera"}, by="ops")
    final = run(drive(engine, run_id))
    assert final.result == {"sent": "ravi"}
    assert final.state["n"] == 42
    assert calls == ["lookup", *sends]  # nothing ran twice


def test_unknown_outcome_of_non_idempotent_tool_escalates_then_resolves() -> None:
    sent: list[str] = []

    @uw.tool
    async def charge(args: Any, info: uw.CallInfo) -> Any:
        sent.append(info.key)
        raise Crash  # the effect happened, the process died before recording it

    flow = uw.Flow("charge", state=Counter)

    @flow.step
    async def pay(ctx: Any) -> Any:
        receipt = await ctx.call(charge, {"amount": 500})
        return ctx.done(receipt)

    engine, run_id = start_and_crash(flow)
    state = run(drive(engine, run_id))
    assert state.status == "escalated"
    assert state.escalation is not None and "charge" in str(state.escalation.reason)
    assert sent == [f"{run_id}:0:pay:0"]  # never re-executed blindly

    engine.resolve(run_id, resolution="succeeded", result={"receipt": "r-1"}, by="ops@bank")
    final = run(drive(engine, run_id))
    assert final.status == "completed"
    assert final.result == {"receipt": "r-1"}
    assert sent == [f"{run_id}:0:pay:0"]
    assert "EscalationResolved" in types(engine, run_id)


def test_idempotent_tool_is_retried_with_the_same_key() -> None:
    keys: list[str] = []

    @uw.tool(idempotent=True)
    async def upsert(args: Any, info: uw.CallInfo) -> Any:
        keys.append(info.key)
        if len(keys) == 1:
            raise Crash
        return "ok"

    flow = uw.Flow("idem", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.done(await ctx.call(upsert, {"id": 1}))

    engine, run_id = start_and_crash(flow)
    final = run(drive(engine, run_id))
    assert final.result == "ok"
    assert keys == [f"{run_id}:0:go:0", f"{run_id}:0:go:0"]


@pytest.mark.parametrize(("found", "expected_runs"), [("happened", 1), ("not_happened", 2)])
def test_reconcile_decides_unknown_outcomes(found: str, expected_runs: int) -> None:
    delivered: list[str] = []

    async def send_fn(args: Any, info: uw.CallInfo) -> Any:
        delivered.append(info.key)
        if len(delivered) == 1:
            raise Crash
        return {"id": "m-2"}

    async def reconcile(key: str) -> uw.Reconciled:
        if found == "happened":
            return uw.Reconciled.happened({"id": "m-1"})
        return uw.Reconciled.not_happened()

    send = uw.tool(send_fn, name="send_sms")
    send.reconciler(reconcile)
    flow = uw.Flow("sms", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.done(await ctx.call(send, {"to": "+91"}))

    engine, run_id = start_and_crash(flow)
    final = run(drive(engine, run_id))
    assert final.status == "completed"
    assert len(delivered) == expected_runs
    assert final.result == ({"id": "m-1"} if found == "happened" else {"id": "m-2"})
    (outcome,) = [
        r.event for r in engine.journal.history("default", run_id)
        if isinstance(r.event, ev.ToolSucceeded)
    ]
    assert outcome.reconciled == (found == "happened")  # the audit trail tells them apart


def test_a_different_call_sequence_on_rerun_is_a_nondeterminism_escalation() -> None:
    @uw.tool
    async def a_tool(args: Any) -> Any:
        return 1

    @uw.tool
    async def b_tool(args: Any) -> Any:
        return 2

    attempt: list[int] = []
    flow = uw.Flow("nondet", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        attempt.append(1)
        await ctx.call(a_tool if len(attempt) == 1 else b_tool, {})
        await ctx.call(b_tool, {"second": True})  # commits the first call's outcome
        if len(attempt) == 1:
            raise Crash
        return ctx.done()

    engine, run_id = start_and_crash(flow)
    final = run(drive(engine, run_id))
    assert final.status == "escalated"
    reason = str(final.escalation and final.escalation.reason)
    assert "'go'" in reason and "#0" in reason and "b_tool" in reason


def test_journaled_values_are_stable_across_reruns() -> None:
    seen: list[tuple[Any, ...]] = []

    @uw.tool
    async def effect(args: Any) -> Any:
        return args

    flow = uw.Flow("values", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        values = (ctx.now(), ctx.uuid(), ctx.random())
        seen.append(values)
        await ctx.call(effect, {"v": str(values)})  # the intent commit journals the values
        if len(seen) == 1:
            raise Crash
        return ctx.done()

    engine, run_id = start_and_crash(flow)
    assert run(drive(engine, run_id)).status == "escalated"  # effect outcome unknown
    assert seen[0] == seen[1]


def test_model_responses_are_never_requested_twice() -> None:
    model = ScriptedModel([{"text": "hello"}, {"text": "again"}])
    crashed: list[bool] = []
    flow = uw.Flow("model", state=Counter)

    @flow.step
    async def ask(ctx: Any) -> Any:
        reply = await ctx.model(model, {"messages": [{"role": "user", "content": "hi"}]})
        if not crashed:
            crashed.append(True)
            raise Crash
        return ctx.done(reply)

    engine, run_id = start_and_crash(flow)
    final = run(drive(engine, run_id))
    assert final.result == {"text": "hello"}
    assert len(model.requests) == 1
    assert final.model_calls == 1


class Args(BaseModel):
    amount: int


def test_tool_failures_timeouts_and_schema_errors_are_journaled() -> None:
    @uw.tool
    async def flaky(args: Any) -> Any:
        raise ConnectionError("gateway down")

    # Read-only: its timeout is a failure (a mutating call's is an unknown outcome).
    @uw.tool(timeout=0.01, read_only=True)
    async def slow(args: Any) -> Any:
        await asyncio.Event().wait()  # only the timeout ends this call

    @uw.tool
    async def typed(args: Args) -> Any:
        return args.amount

    flow = uw.Flow("errors", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        errors = []
        for t, a in ((flaky, {}), (slow, {}), (typed, {"amount": "x"})):
            try:
                await ctx.call(t, a)
            except uw.ToolCallError as exc:
                errors.append([exc.tool, exc.error_type, exc.retryable])
        return ctx.done(errors)

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    final = run(drive(engine, run_id))
    assert final.result == [
        ["flaky", "ConnectionError", False],
        ["slow", "ToolTimedOut", True],
        ["typed", "SchemaValidationFailed", False],
    ]
    names = types(engine, run_id)
    assert {"ToolFailed", "ToolTimedOut", "SchemaValidationFailed"} <= set(names)


def test_an_exception_in_a_step_stops_the_run_dead_until_an_operator_resumes_it() -> None:
    broken = [True]
    calls: list[str] = []

    @uw.tool
    async def book(args: Any, info: uw.CallInfo) -> Any:
        calls.append(info.key)
        return "booked"

    flow = uw.Flow("boom", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        await ctx.call(book, {})
        if broken[0]:
            raise ValueError("no invoice 42")
        return ctx.goto(finish)

    @flow.step
    async def finish(ctx: Any) -> Any:
        return ctx.done("ok")

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    dead = run(drive(engine, run_id))
    assert dead.status == "dead"
    assert dead.error == "ValueError: no invoice 42"
    row = engine.store.get_run("default", run_id)
    assert row is not None and (row.status, row.next_wake_at) == ("dead", None)
    assert run(uw.Runner(engine).run_until_idle()) == 0  # nothing picks a dead run up

    broken[0] = False  # the operator fixed the cause
    engine.resume(run_id, by="ops@acme")
    final = run(drive(engine, run_id))
    assert final.status == "completed"
    assert calls == [f"{run_id}:0:go:0"]  # the completed booking was not repeated
    with pytest.raises(ConfigurationError, match="not dead"):
        engine.resume(run_id, by="ops@acme")


def test_a_dead_run_can_resume_at_another_step_or_be_cancelled() -> None:
    flow = uw.Flow("boom2", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        raise RuntimeError("bad data")

    @flow.step
    async def skip(ctx: Any) -> Any:
        return ctx.done("skipped")

    engine, _ = memory_engine([flow])
    first, _ = engine.start(flow)
    second, _ = engine.start(flow)
    run(uw.Runner(engine).run_until_idle())
    with pytest.raises(ConfigurationError, match="no step 'nowhere'"):
        engine.resume(first, by="ops", step="nowhere")
    engine.resume(first, by="ops", step="skip")
    engine.cancel(second, by="ops", reason="bad data")
    run(uw.Runner(engine).run_until_idle())
    assert engine.state(first).result == "skipped"
    assert engine.state(second).status == "cancelled"


def test_cancel_takes_effect_at_the_next_step_boundary() -> None:
    flow = uw.Flow("cancel", state=Counter)

    @flow.step
    async def loop(ctx: Any) -> Any:
        ctx.state.n += 1
        return ctx.sleep(5, then=loop)

    engine, _clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    run(uw.Runner(engine).run_until_idle())
    engine.cancel(run_id, by="priya", reason="customer paid by cheque")
    final = run(drive(engine, run_id))
    assert final.status == "cancelled"
    assert final.state["n"] == 1
    last = engine.journal.history("default", run_id)[-1].event
    assert isinstance(last, ev.RunCancelled) and last.by == "priya"


def test_a_stale_lease_holder_cannot_append() -> None:
    flow = uw.Flow("fence", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        # While this holder works, its lease expires and another worker takes the run.
        clock.advance(engine.lease_ttl + 1)
        other = Engine(engine.store, flows=[flow], clock=clock, owner="other")
        assert other.claim()
        return ctx.done()

    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    before = len(engine.journal.history("default", run_id))
    (lease,) = engine.claim()
    with pytest.raises(FencedError):
        run(engine.activate(lease))
    assert len(engine.journal.history("default", run_id)) == before
    row = engine.store.get_run("default", run_id)
    assert row is not None and row.lease_owner == "other"


def test_deleting_every_checkpoint_yields_identical_state() -> None:
    flow = uw.Flow("ckpt", state=Counter)

    @flow.step
    async def loop(ctx: Any) -> Any:
        ctx.state.n += 1
        ctx.state.seen.append({"i": ctx.state.n, "pad": "x" * 200})
        return ctx.goto(loop) if ctx.state.n < 40 else ctx.done(ctx.state.n)

    engine, _ = memory_engine([flow])
    engine.checkpoint_every = 7
    run_id, _ = engine.start(flow)
    final = run(drive(engine, run_id))
    assert engine.store.load_checkpoint("default", run_id) is not None
    with_ckpt = engine.journal.load("default", run_id).to_json()
    assert engine.store.delete_checkpoints("default", run_id) == 1
    assert engine.journal.load("default", run_id).to_json() == with_ckpt == final.to_json()


def test_goto_to_an_unknown_step_stops_the_run_with_a_clear_reason() -> None:
    flow = uw.Flow("badgoto", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.goto("nowhere")

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    final = run(drive(engine, run_id))
    assert final.status == "dead"
    assert "no step 'nowhere'" in str(final.error)


def test_a_cancel_sent_while_a_step_runs_is_not_lost_when_the_run_waits() -> None:
    flow = uw.Flow("cancel_race", state=Counter)
    holder: list[Engine] = []

    @flow.step
    async def go(ctx: Any) -> Any:
        holder[0].cancel(ctx.run_id, by="ops", reason="arrived mid-step")
        return ctx.wait("reply", then=go)  # no timeout: nothing else would wake it

    engine, _ = memory_engine([flow])
    holder.append(engine)
    run_id, _ = engine.start(flow)
    run(uw.Runner(engine).run_until_idle())
    final = engine.state(run_id)
    assert final.status == "cancelled"
    assert final.error == "cancelled by ops: arrived mid-step"


def test_reserved_signal_names_and_state_without_defaults_are_clear_errors() -> None:
    class Needs(BaseModel):
        customer: str

    flow = uw.Flow("strict", state=Needs)

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.done()

    other = uw.Flow("fine", state=Counter)

    @other.step
    async def only(ctx: Any) -> Any:
        return ctx.wait("x", then=only)

    engine, _ = memory_engine([flow, other])
    with pytest.raises(ConfigurationError, match="state Needs has required fields"):
        engine.start(flow)
    run_id, _ = engine.start(other)
    with pytest.raises(ConfigurationError, match="reserved"):
        engine.signal(run_id, "underway.cancel")
    with pytest.raises(ConfigurationError, match="not escalated"):
        engine.resolve(run_id, resolution="retry", by="ops")


def test_a_worker_that_loses_its_lease_mid_call_stops_the_call() -> None:
    started = asyncio.Event()

    @uw.tool
    async def slow_transfer(args: Any) -> Any:
        started.set()
        await asyncio.Event().wait()  # only the heartbeat's cancellation ends this call
        return "sent"

    flow = uw.Flow("slow", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        return ctx.done(await ctx.call(slow_transfer, {"amount": 10}))

    engine, clock = memory_engine([flow])
    engine.lease_ttl = 0.3
    run_id, _ = engine.start(flow)

    async def scenario() -> None:
        (lease,) = engine.claim()
        activation = asyncio.create_task(engine.activate(lease))
        await started.wait()
        # Another worker takes the run over (this one looked dead to it).
        engine.store.expire_lease("default", run_id, engine.owner)
        clock.advance(1)
        assert Engine(engine.store, flows=[flow], clock=clock, owner="other").claim()
        with pytest.raises(FencedError, match="step was cancelled"):
            await asyncio.wait_for(activation, PATIENCE_S)

    run(scenario())
    assert "ToolSucceeded" not in types(engine, run_id)


def test_tools_receive_a_fence_of_the_lease_token_that_grows_on_takeover() -> None:
    fences: list[int] = []

    @uw.tool(mutating=False)
    async def observe(args: Any, info: uw.CallInfo) -> Any:
        fences.append(info.fence)
        if len(fences) == 1:
            raise Crash
        return None

    flow = uw.Flow("fenced", state=Counter)

    @flow.step
    async def go(ctx: Any) -> Any:
        await ctx.call(observe, {})
        return ctx.done()

    engine, run_id = start_and_crash(flow)
    run(drive(engine, run_id))
    row = engine.store.get_run("default", run_id)
    assert row is not None and fences[1] // FENCE_STRIDE == row.lease_token
    assert fences[0] // FENCE_STRIDE == 1
    assert fences[1] > fences[0]
