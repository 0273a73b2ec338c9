"""A whole flow — a mutating tool, a durable sleep, a signal — runs to completion on every
backend, and its journal verifies."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from store_backends import Backend

import underway as uw
from fakes.keys import encrypted
from underway.store import Store
from underway.testing import ManualClock


class Invoice(BaseModel):
    customer: str


class Progress(BaseModel):
    sent: list[str] = []
    answer: Any = None


def build(sent_mail: list[str]) -> tuple[uw.Flow[Progress, Invoice], uw.Tool]:
    flow = uw.Flow("follow_up", state=Progress, input=Invoice)

    @uw.tool(mutating=True)
    def send_email(args: Any, call: uw.CallInfo) -> dict[str, str]:
        sent_mail.append(call.key)
        return {"message_id": f"m-{len(sent_mail)}", "to": args["to"]}

    @flow.step(start=True)
    async def remind(ctx: uw.RunContext[Progress, Invoice]) -> Any:
        reply = await ctx.call(send_email, {"to": ctx.input.customer})
        ctx.state.sent.append(reply["message_id"])
        return ctx.sleep(3600, then=ask)

    @flow.step
    async def ask(ctx: uw.RunContext[Progress, Invoice]) -> Any:
        return ctx.wait("paid", timeout=86_400, then=close)

    @flow.step
    async def close(ctx: uw.RunContext[Progress, Invoice]) -> Any:
        ctx.state.answer = ctx.signal
        return ctx.done({"sent": ctx.state.sent, "paid": ctx.signal, "late": ctx.timed_out})

    return flow, send_email


def test_a_flow_with_a_tool_a_sleep_and_a_signal_completes(backend: Backend) -> None:
    sent_mail: list[str] = []
    flow, send_email = build(sent_mail)
    clock = ManualClock(1_700_000_000.0)
    engine = uw.Engine(backend.open(), flows=[flow], tools=[send_email], clock=clock,
                       checkpoint_every=2)
    runner = uw.Runner(engine)

    run_id, created = engine.start(flow, {"customer": "ada@example.com"}, tenant_id="acme",
                                   idempotency_key="invoice-42")
    again, created_again = engine.start(flow, {"customer": "ada@example.com"},
                                        tenant_id="acme", idempotency_key="invoice-42")
    assert created and not created_again and again == run_id

    asyncio.run(runner.run_until_idle())
    row = engine.store.get_run("acme", run_id)
    assert row is not None and row.status == "waiting" and row.step == "ask"
    assert row.next_wake_at == clock.now() + 3600 and row.lease_owner is None

    clock.advance(3600)
    asyncio.run(runner.run_until_idle())
    row = engine.store.get_run("acme", run_id)
    assert row is not None and row.status == "waiting" and row.waiting_signal == "paid"

    clock.advance(60)
    assert engine.signal(run_id, "paid", {"amount": 120}, tenant_id="acme", signal_id="pay-1")
    assert not engine.signal(run_id, "paid", {"amount": 120}, tenant_id="acme",
                             signal_id="pay-1")
    state = asyncio.run(runner.run_until_complete(run_id, tenant_id="acme"))

    assert state.status == "completed"
    assert state.result == {"sent": ["m-1"], "paid": {"amount": 120}, "late": False}
    assert len(sent_mail) == 1  # the email went out once
    verification = engine.journal.verify("acme", run_id)
    assert verification.ok, verification.reason
    assert engine.store.pending_signals("acme", run_id) == []
    assert engine.store.load_checkpoint("acme", run_id) is not None
    replayed = engine.journal.load("acme", run_id, use_checkpoint=False)
    assert replayed.status == "completed" and replayed.result == state.result
    kinds = [type(r.event).__name__ for r in engine.journal.history("acme", run_id)]
    assert kinds.count("ToolStarted") == kinds.count("ToolSucceeded") == 1
    assert "TimerFired" in kinds and "SignalReceived" in kinds


def test_a_cancel_sent_during_a_step_wakes_the_run_it_hands_back(backend: Backend) -> None:
    flow = uw.Flow("cancel_race", state=Progress)
    engines: list[uw.Engine] = []

    @flow.step
    async def go(ctx: uw.RunContext[Progress, Any]) -> Any:
        engines[0].cancel(ctx.run_id, by="ops", reason="mid-step")
        return ctx.wait("reply", then=go)  # no timeout: only the cancel can wake it

    clock = ManualClock(1_700_000_000.0)
    engine = uw.Engine(backend.open(), flows=[flow], clock=clock)
    engines.append(engine)
    run_id, _ = engine.start(flow)
    asyncio.run(uw.Runner(engine).run_until_idle())
    final = engine.state(run_id)
    assert final.status == "cancelled"
    assert final.error == "cancelled by ops: mid-step"


def test_runs_keep_their_queue_and_delayed_start(backend: Backend) -> None:
    flow = uw.Flow("queued", state=Progress)

    @flow.step
    async def only(ctx: uw.RunContext[Progress, Any]) -> Any:
        return ctx.done()

    clock = ManualClock(1_700_000_000.0)
    engine = uw.Engine(backend.open(), flows=[flow], clock=clock)
    run_id, _ = engine.start(flow, queue="billing", start_at=clock.now() + 60)
    row = engine.store.get_run("default", run_id)
    assert row is not None and (row.queue, row.next_wake_at) == ("billing", clock.now() + 60)
    assert asyncio.run(uw.Runner(engine).run_until_idle()) == 0  # not due yet
    clock.advance(61)
    assert asyncio.run(uw.Runner(engine).run_until_complete(run_id)).status == "completed"


class Chat(BaseModel):
    messages: list[dict[str, str]] = []


def test_a_long_conversation_is_whole_when_another_process_takes_the_run_over(
    backend: Backend,
) -> None:
    """A fresh engine (empty caches, its own connection) loads a 300-message conversation
    from the store alone — blobs read in batches, plain or sealed (a sealed chain node keeps
    its link readable, so it is read in batches too) — and the audit agrees."""
    chat = uw.Flow("chat", state=Chat)

    @chat.step(start=True)
    async def talk(ctx: uw.RunContext[Chat, Any]) -> Any:
        for i in range(300):
            ctx.state.messages.append({"role": "user", "content": f"message {i} " + "x" * i})
        return ctx.wait("reply", then=talk)

    for sealed in (False, True):
        tenant = "sealed" if sealed else "plain"

        def opened(sealed: bool = sealed) -> Store:
            store = backend.open()
            if sealed:
                encrypted(store, b"c" * 32)
            return store

        engine = uw.Engine(opened(), flows=[chat])
        run_id, _ = engine.start(chat, tenant_id=tenant)
        asyncio.run(uw.Runner(engine).run_until_idle())
        taker = uw.Engine(opened(), flows=[chat])
        state = taker.journal.load(tenant, run_id)
        assert state.status == "waiting"
        assert isinstance(state.state, dict)
        assert state.state["messages"] == [
            {"role": "user", "content": f"message {i} " + "x" * i} for i in range(300)
        ]
        assert taker.journal.verify(tenant, run_id).ok
