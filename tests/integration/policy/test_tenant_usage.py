"""A tenant's usage, derived from the journals of its runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from underway import Engine, Flow, ManualClock, RunContext, Runner, connect, tool
from underway.codec import checkpoint_where
from underway.effects import Tool
from underway.flow import Next
from underway.guard.budgets import TenantUsage, Usage, tenant_usage
from underway.journal.state import RunState
from underway.store.base import Store
from underway.testing import ScriptedModel

T0 = 1_717_200_000.0
SEND_TAKES = 10.0
REFUND_TAKES = 1.0


class Crash(BaseException):
    """Stands in for the worker dying in the middle of a step."""


class Invoice(BaseModel):
    customer: str = "c-1"
    refund: int = 500


class Progress(BaseModel):
    done: bool = False


@dataclass
class Agent:
    """An invoice agent: a model, a reminder (a message), a refund (money), a note that
    crashes the worker once per entry in ``crashes``, and a lookup."""

    clock: ManualClock
    crashes: list[str] = field(default_factory=list)
    flow: Flow[Progress, Invoice] = field(init=False)
    tools: list[Tool] = field(init=False)

    def __post_init__(self) -> None:
        clock, crashes = self.clock, self.crashes

        @tool(idempotent=True, message=True)
        def send_reminder(args: Any) -> Any:
            clock.advance(SEND_TAKES)   # the provider takes a while to answer
            return {"sent": args["to"]}

        @tool(idempotent=True, amount="amount", currency="INR")
        def issue_refund(args: Any) -> Any:
            clock.advance(REFUND_TAKES)
            return {"refunded": args["amount"]}

        @tool(mutating=False)
        def file_note(args: Any) -> Any:
            if crashes:
                crashes.pop()
                raise Crash
            return {"filed": True}

        @tool(mutating=False)
        def lookup_invoice(args: Any) -> Any:
            return {"paid": False}

        model = ScriptedModel(["draft"] * 50, cost_per_token=0.001)
        flow: Flow[Progress, Invoice] = Flow("refunds", state=Progress, input=Invoice)

        @flow.step(start=True)
        async def remind(ctx: RunContext[Progress, Invoice]) -> Next:
            await ctx.model(model, {"prompt": f"remind {ctx.input.customer}"})
            await ctx.call(send_reminder, {"to": ctx.input.customer})
            await ctx.model(model, {"prompt": "refund?"})
            await ctx.call(issue_refund, {"amount": ctx.input.refund})
            await ctx.model(model, {"prompt": "note?"})
            await ctx.call(file_note, {"text": "refunded"})
            return ctx.sleep(3600, then=check)

        @flow.step
        async def check(ctx: RunContext[Progress, Invoice]) -> Next:
            await ctx.model(model, {"prompt": "paid?"})
            await ctx.call(lookup_invoice, {"customer": ctx.input.customer})
            ctx.state.done = True
            return ctx.done()

        self.flow = flow
        self.tools = [send_reminder, issue_refund, file_note, lookup_invoice]


@pytest.fixture(params=["sqlite_url", pytest.param("pg_url", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Any:
    s = connect(request.getfixturevalue(request.param))
    yield s
    s.close()


def engine(store: Store, agent: Agent, *, checkpoint_every: int = 100) -> Engine:
    return Engine(store, flows=[agent.flow], tools=agent.tools, clock=agent.clock,
                  checkpoint_every=checkpoint_every)


def run_all(eng: Engine) -> None:
    asyncio.run(Runner(eng).run_until_idle())


def event_times(store: Store, eng: Engine, tenant: str) -> list[float]:
    times: set[float] = set()
    for row in store.list_runs(tenant):
        times.update(r.at for r in eng.journal.history(tenant, row.run_id))
    return sorted(times)


def checkpointed_calls(store: Store, eng: Engine, tenant: str) -> list[str]:
    """The status of every call held in the tenant's checkpoints."""
    found = []
    for row in store.list_runs(tenant):
        ckpt = store.load_checkpoint(tenant, row.run_id)
        if ckpt is not None:
            data = eng.journal.codec.decode(ckpt[1], lambda keys: store.get_blobs(tenant, keys),
                                            checkpoint_where(tenant, row.run_id, ckpt[0]))
            found.extend(c.status for c in RunState.from_json(data).calls)
    return found


def test_usage_since_a_time_counts_the_events_at_or_after_it(store: Store) -> None:
    clock = ManualClock(T0)
    agent = Agent(clock)
    eng = engine(store, agent)
    run_id, _ = eng.start(agent.flow, {"customer": "c-1", "refund": 500}, tenant_id="acme")
    eng.start(agent.flow, {"customer": "c-9", "refund": 7}, tenant_id="globex")
    run_all(eng)
    clock.advance(3600)
    woke = clock.now()
    run_all(eng)
    state = eng.state(run_id, tenant_id="acme")
    assert state.status == "completed"

    everything = tenant_usage(store, "acme", since=T0)
    whole_run = Usage.from_state(state)
    assert everything == Usage(
        tokens_in=whole_run.tokens_in, tokens_out=whole_run.tokens_out,
        cost_usd=pytest.approx(whole_run.cost_usd), model_calls=4, tool_calls=4, messages=1,
        money={"INR": 500.0},
    )
    assert (whole_run.model_calls, whole_run.tool_calls, whole_run.messages) == (4, 4, 1)

    # The reminder was started before ``since`` and answered after it: the call was counted
    # in the earlier window, the message it sent in this one.
    mid_send = tenant_usage(store, "acme", since=T0 + SEND_TAKES / 2)
    assert (mid_send.model_calls, mid_send.tool_calls, mid_send.messages, mid_send.money) == (
        3, 3, 1, {"INR": 500.0}
    )

    second_step = tenant_usage(store, "acme", since=woke)
    assert (second_step.model_calls, second_step.tool_calls, second_step.messages) == (1, 1, 0)
    assert second_step.money == {}
    assert second_step.tokens > 0

    assert tenant_usage(store, "acme", since=clock.now() + 1) == Usage()
    assert tenant_usage(store, "globex", since=T0).money == {"INR": 7.0}
    assert tenant_usage(store, "nobody", since=T0) == Usage()


@pytest.mark.parametrize("checkpoint_every", [1, 2, 3, 100])
def test_checkpoints_do_not_change_usage(store: Store, checkpoint_every: int) -> None:
    """Checkpoints are caches: usage read through them equals usage read from whole
    journals, for every ``since``, also for a run that died in the middle of a step."""
    clock = ManualClock(T0)
    agent = Agent(clock, crashes=["once"])
    eng = engine(store, agent, checkpoint_every=checkpoint_every)
    eng.start(agent.flow, {"customer": "c-1", "refund": 500}, tenant_id="acme")
    clock.advance(1)
    eng.start(agent.flow, {"customer": "c-2", "refund": 900}, tenant_id="acme")
    with pytest.raises(Crash):
        run_all(eng)
    if checkpoint_every == 3:
        # The dead run's checkpoint holds the refund as started; its outcome follows it.
        assert "started" in checkpointed_calls(store, eng, "acme")

    def usage_everywhere() -> list[Usage]:
        times = event_times(store, eng, "acme")
        sinces = [T0 - 1, *times, *(t + 0.5 for t in times)]
        return [tenant_usage(store, "acme", since=s) for s in sinces]

    def compare() -> None:
        through_checkpoints = usage_everywhere()
        store.delete_checkpoints("acme")
        assert usage_everywhere() == through_checkpoints

    compare()
    clock.advance(eng.lease_ttl + 1)
    run_all(eng)
    compare()
    clock.advance(3600)
    run_all(eng)
    assert all(r.status == "completed" for r in store.list_runs("acme"))
    compare()


def test_a_kept_tenant_usage_reads_only_what_is_new(store: Store) -> None:
    """Refreshed after every stage of several runs — a crash mid-step, a takeover, waits,
    completion — a :class:`TenantUsage` equals a count from scratch, and once nothing moves
    it reads no journal at all."""
    clock = ManualClock(T0)
    agent = Agent(clock, crashes=["once"])
    eng = engine(store, agent)
    kept = TenantUsage("acme", since=T0 + 5)

    def same() -> Usage:
        usage = kept.refresh(store)
        assert usage == tenant_usage(store, "acme", since=T0 + 5)
        return usage

    eng.start(agent.flow, {"customer": "c-1", "refund": 500}, tenant_id="acme")
    eng.start(agent.flow, {"customer": "c-2", "refund": 900}, tenant_id="acme")
    assert same() == Usage()
    with pytest.raises(Crash):
        run_all(eng)  # a run died holding its lease: its events are read every refresh
    same()
    clock.advance(eng.lease_ttl + 1)
    run_all(eng)  # taken over; both runs now wait an hour
    waiting = same()
    assert waiting.money == {"INR": 1400.0} and waiting.messages == 2
    read = kept.events_read
    assert same() == waiting and kept.events_read == read  # nothing moved, nothing read
    clock.advance(3600)
    run_all(eng)
    done = same()
    assert done.model_calls == waiting.model_calls + 2
    assert kept.events_read - read <= 2 * 12  # only the second step of each run


def test_a_run_handed_back_between_refreshes_is_read_again(store: Store) -> None:
    """A worker that stops between steps hands the run back without rewriting its row:
    the row's sequence number is then behind the journal. The claim's new lease token is
    what tells the kept usage to read the run again."""
    clock = ManualClock(T0)

    @tool(idempotent=True, message=True)
    def notify(args: Any) -> Any:
        return {"sent": True}

    flow: Flow[Progress, Any] = Flow("two_steps", state=Progress)

    @flow.step(start=True)
    async def first(ctx: RunContext[Progress, Any]) -> Next:
        await ctx.call(notify, {})
        return ctx.goto(second)

    @flow.step
    async def second(ctx: RunContext[Progress, Any]) -> Next:
        return ctx.done()

    eng = Engine(store, flows=[flow], tools=[notify], clock=clock)
    kept = TenantUsage("acme", since=T0)
    run_id, _ = eng.start(flow, None, tenant_id="acme")
    assert kept.refresh(store) == Usage()
    [lease] = eng.claim(tenant_id="acme")
    asyncio.run(eng.activate(lease, should_stop=lambda: True))
    row = store.get_run("acme", run_id)
    assert row is not None and row.lease_owner is None and row.status == "ready"
    assert row.last_seq < len(eng.journal.history("acme", run_id))  # the row lags
    assert kept.refresh(store) == tenant_usage(store, "acme", since=T0)
    assert (kept.refresh(store).messages, kept.refresh(store).tool_calls) == (1, 1)
