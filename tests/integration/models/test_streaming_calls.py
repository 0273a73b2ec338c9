"""``ctx.model(model, request, stream=True)``: deltas reach the run's live stream with
offsets that only grow, the complete reply is journaled once and counted once, a
journaled call streams nothing, and a call made again says first that the partial answer
before it was abandoned."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.codec import stream_where
from underway.effects import Emit, ModelReply
from underway.engine import Engine
from underway.events import JSON
from underway.models import ModelError
from underway.retry import RetryPolicy
from underway.runner import Runner
from underway.store import Store, connect
from underway.store.streams import NewDelta, StreamDelta
from underway.testing import ManualClock, ScriptedModel


class S(BaseModel):
    answer: str = ""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
    else:
        url = request.getfixturevalue("pg_url")
    s = connect(url)
    yield s
    s.close()


def live(store: Store, run_id: str, after: int = 0) -> list[tuple[int, JSON]]:
    """The run's live stream as (offset, delta)."""
    return [(o, json.loads(store.codec.open_text(
                 d.data, stream_where("default", run_id, d.key, d.attempt))))
            for o, d in store.read_stream("default", run_id, after=after, limit=1000)]


def drive(engine: Engine) -> None:
    asyncio.run(Runner(engine).run_until_idle())


def events(engine: Engine, run_id: str, cls: type[Any]) -> list[Any]:
    return [r.event for r in engine.journal.history("default", run_id)
            if isinstance(r.event, cls)]


def test_deltas_reach_the_live_stream_and_the_reply_is_journaled_once(store: Store) -> None:
    model = ScriptedModel([{"text": "the tide turns at noon"}])
    flow = uw.Flow("tide", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        reply = await ctx.model(model, {"messages": []}, stream=True)
        return ctx.done(reply)

    engine = Engine(store, flows=[flow], clock=ManualClock(1.7e9))
    run_id, _ = engine.start(flow)
    drive(engine)
    s = engine.state(run_id)
    assert s.status == "completed" and s.result == {"text": "the tide turns at noon"}
    rows = live(store, run_id)
    offsets = [o for o, _ in rows]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    texts = [d["text"] for _, d in rows if d["type"] == "text"]
    assert "".join(texts) == "the tide turns at noon" and len(texts) == 5
    assert rows[-1][1] == {"type": "done"}
    assert len(events(engine, run_id, ev.ModelResponded)) == 1 and s.model_calls == 1
    assert live(store, run_id, after=offsets[2]) == rows[3:], "a reader resumes at its offset"


class Cut:
    """Streams half an answer and fails as a provider outage would, then answers whole."""

    name = "cut"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: JSON) -> ModelReply:
        raise AssertionError("a streamed call is made with stream()")

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        self.calls += 1
        await emit({"type": "text", "text": "half "})
        if self.calls == 1:
            raise ModelError("test", "cut-1", status=503, provider_message="gone",
                             retryable=True, retry_after=5.0)
        await emit({"type": "text", "text": "whole"})
        return ModelReply({"text": "half whole"}, "cut-1", 7, 2, 0.01)


def test_a_call_made_again_says_the_partial_answer_was_abandoned(store: Store) -> None:
    model = Cut()
    flow = uw.Flow("cut", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.model(model, {"messages": []}, stream=True))

    clock = ManualClock(1.7e9)
    engine = Engine(store, flows=[flow], clock=clock)
    run_id, _ = engine.start(flow)
    drive(engine)
    assert engine.state(run_id).status == "waiting"
    clock.advance(6)
    drive(engine)
    s = engine.state(run_id)
    assert s.status == "completed" and s.model_calls == 1 and model.calls == 2
    rows = live(store, run_id)
    assert [d for _, d in rows] == [
        {"type": "text", "text": "half "},
        {"type": "restart", "attempt": 2},
        {"type": "text", "text": "half "},
        {"type": "text", "text": "whole"},
        {"type": "done"},
    ]
    assert [o for o, _ in rows] == sorted({o for o, _ in rows})
    assert [e.response for e in events(engine, run_id, ev.ModelResponded)] == [
        {"text": "half whole"}]


def test_a_journaled_call_streams_nothing_when_its_step_runs_again(store: Store) -> None:
    model = ScriptedModel([{"text": "once only"}])
    tries = {"n": 0}

    @uw.tool(mutating=False, retry=RetryPolicy(max_attempts=3, initial_interval=1.0,
                                               jitter=False))
    async def flaky(args: JSON) -> JSON:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError("try again")
        return {"ok": True}

    flow = uw.Flow("again", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        reply = await ctx.model(model, {"messages": []}, stream=True)
        await ctx.call(flaky, {})
        return ctx.done(reply)

    clock = ManualClock(1.7e9)
    engine = Engine(store, flows=[flow], tools=[flaky], clock=clock)
    run_id, _ = engine.start(flow)
    drive(engine)
    before = live(store, run_id)
    clock.advance(5)
    drive(engine)
    s = engine.state(run_id)
    assert s.status == "completed" and tries["n"] == 2 and len(model.requests) == 1
    assert live(store, run_id) == before, "the re-run step answered from the journal"
    assert s.model_calls == 1


class Paced:
    """Says one word, waits until a reader has seen it, then says the rest."""

    name = "paced"

    def __init__(self) -> None:
        self.seen = asyncio.Event()

    async def complete(self, request: JSON) -> ModelReply:
        raise AssertionError("a streamed call is made with stream()")

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        await emit({"type": "text", "text": "first "})
        await self.seen.wait()
        await emit({"type": "text", "text": "second"})
        return ModelReply({"text": "first second"}, "paced-1", 3, 2, 0.0)


def test_a_client_follows_the_stream_while_the_model_answers(store: Store) -> None:
    model = Paced()
    flow = uw.Flow("paced", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.model(model, {"messages": []}, stream=True))

    engine = Engine(store, flows=[flow], clock=ManualClock(1.7e9))
    run_id, _ = engine.start(flow)
    client = uw.Client(store)
    got: list[StreamDelta] = []

    async def follow() -> None:
        async for d in client.stream(run_id):
            got.append(d)
            if d.delta == {"type": "text", "text": "first "}:
                model.seen.set()  # the model goes on only once this reader saw its word

    async def both() -> None:
        await asyncio.gather(Runner(engine).run_until_idle(), follow())

    asyncio.run(both())
    assert [d.delta for d in got] == [{"type": "text", "text": "first "},
                                      {"type": "text", "text": "second"}, {"type": "done"}]
    assert engine.state(run_id).status == "completed"
    offsets = [d.offset for d in got]
    assert offsets == sorted(set(offsets))
    later = client.read_stream(run_id, after=offsets[0])
    assert [d.offset for d in later] == offsets[1:], "a reader resumes after its offset"
    with pytest.raises(uw.errors.RunNotFound):
        client.read_stream(run_id, tenant_id="other")


def test_a_later_call_drops_earlier_deltas_and_retention_drops_the_rest(store: Store) -> None:
    model = ScriptedModel([{"text": "one two"}, {"text": "three four"}, {"text": "five"}])
    flow = uw.Flow("twice", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        await ctx.model(model, {"messages": []}, stream=True)
        return ctx.done(await ctx.model(model, {"messages": ["again"]}, stream=True))

    once = uw.Flow("once", state=S)

    @once.step
    async def say(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.model(model, {"messages": []}, stream=True))

    clock = ManualClock(1.7e9)
    engine = Engine(store, flows=[flow, once], clock=clock)
    run_id, _ = engine.start(flow)
    drive(engine)
    rows = live(store, run_id)
    assert [d.get("text") for _, d in rows] == ["three ", "four", None], \
        "the first call's deltas went once the second call's reply was journaled"
    assert store.prune_streams(before=clock.now() - 60) == 0, "recent deltas stay"
    assert store.prune_streams(before=clock.now() + 1) == 3
    assert live(store, run_id) == []
    later, _ = engine.start(once)
    drive(engine)
    assert live(store, later)[0][0] > rows[-1][0], "an offset is never reused"


def test_retention_keeps_the_stream_of_a_run_a_worker_holds_and_a_lost_lease_writes_none(
        store: Store) -> None:
    flow = uw.Flow("held", state=S)

    @flow.step
    async def wait(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(None)

    engine = Engine(store, flows=[flow], clock=ManualClock(1.7e9))
    run_id, _ = engine.start(flow)
    (lease,) = store.claim(owner="w1", now=1.7e9, ttl=30.0, run_id=run_id)
    row = NewDelta("k", "wait", 0, 1, '{"type":"text","text":"x"}', 1.7e9)
    assert store.append_stream("default", run_id, lease.token, [row])
    assert store.prune_streams(before=1.8e9) == 0, "a held run's stream stays"
    assert not store.append_stream("default", run_id, lease.token + 1, [row]), \
        "a worker that does not hold the lease writes nothing"
    assert len(live(store, run_id)) == 1


@pytest.mark.postgres
def test_on_postgres_a_write_wakes_readers_that_share_one_listening_connection(
        pg_url: str) -> None:
    store = connect(pg_url)
    flow = uw.Flow("bell", state=S)

    @flow.step
    async def idle(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(None)

    engine = Engine(store, flows=[flow], clock=ManualClock(1.7e9))
    runs = [engine.start(flow)[0] for _ in range(2)]
    leases = {r: store.claim(owner="w", now=1.7e9, ttl=600.0, run_id=r)[0] for r in runs}

    async def go() -> None:
        bells = [store.stream_bell() for _ in runs]
        for bell, run in zip(bells, runs, strict=True):
            await bell.wait(run, 600)  # the first wait watches the run and returns
        waiting = [asyncio.ensure_future(b.wait(r, 600)) for b, r in zip(bells, runs,
                                                                        strict=True)]
        await asyncio.sleep(0)
        for run in runs:  # only a notification ends a wait of ten minutes
            row = NewDelta("k", "idle", 0, 1, '{"type":"text","text":"x"}', 1.7e9)
            await asyncio.to_thread(store.append_stream, "default", run,
                                    leases[run].token, [row])
        await asyncio.gather(*waiting)
        for bell in bells:
            await bell.close()

    asyncio.run(go())
    store.close()
