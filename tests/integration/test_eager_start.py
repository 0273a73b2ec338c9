"""Eager start on SQLite and PostgreSQL: a worker serving an engine takes the runs that
engine starts (``Engine.start``, a step's child runs) in the start's own transaction while
it has a free slot, and activates them from what the start wrote; ``underway.run`` does
the same in one process. What is journaled is what a claimed run journals."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import Engine, Flow, RunContext, Worker, connect, tool
from underway.control import CANCEL
from underway.store import Lease, SignalRecord, Store

PATIENCE_S = 120.0
"""A guard against hangs, never reached: what is awaited takes well under a second."""


class Count(BaseModel):
    i: int = 0


class Steps(BaseModel):
    n: int = 3


@tool(mutating=False)
async def nothing(args: Any) -> Any:
    return {"ok": True}


looping: Flow[Count, Steps] = Flow("looping", state=Count, input=Steps)


@looping.step
async def tick(ctx: RunContext[Count, Steps]) -> Any:
    await ctx.call(nothing, {})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)


GATE: asyncio.Event | None = None


@tool(mutating=False, timeout=600)
async def gated(args: Any) -> Any:
    assert GATE is not None
    await GATE.wait()
    return {}


holding: Flow[Count, Steps] = Flow("holding", state=Count, input=Steps)


@holding.step
async def hold(ctx: RunContext[Count, Steps]) -> Any:
    await ctx.call(gated, {})
    return ctx.done(None)


parent: Flow[Count, Steps] = Flow("parent", state=Count, input=Steps)


@parent.step
async def spawn_child(ctx: RunContext[Count, Steps]) -> Any:
    child = await ctx.start(looping, {"n": ctx.input.n}, key="only")
    outcome = await ctx.wait_for(child)
    return ctx.done(outcome.result)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A fresh, migrated database of each kind."""
    url: str = request.getfixturevalue("pg_url" if request.param == "postgres"
                                       else "sqlite_url")
    s = connect(url)
    yield s
    s.close()


def new_engine(store: Store) -> Engine:
    return Engine(store, flows=[looping, holding, parent], tools=[nothing, gated])


async def until(check: Callable[[], bool], what: str) -> None:
    """Let the worker in this loop work until ``check`` holds (a hang fails the test)."""
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {PATIENCE_S:g}s waiting for {what}")
        await asyncio.sleep(0.01)


def types(engine: Engine, run_id: str) -> list[str]:
    return [type(r.event).__name__ for r in engine.journal.history("default", run_id)]


def serving(engine: Engine, **options: Any) -> tuple[Worker, asyncio.Task[None]]:
    # A worker that, once idle, would not look for work again for a minute: what it does
    # sooner, an eager start handed it.
    worker = Worker(engine, poll=60, min_poll=60, listen=False, **options)
    return worker, asyncio.create_task(worker.run())


def test_a_worker_takes_the_run_its_engine_starts_in_the_start_itself(store: Store) -> None:
    engine = new_engine(store)

    async def scenario() -> None:
        worker, task = serving(engine)
        await worker.ready.wait()
        eager, created = engine.start(looping, {"n": 3})
        row = store.get_run("default", eager)
        # Leased as the start returned: no claim ran in between on this loop.
        assert created and row is not None
        assert (row.lease_owner, row.lease_token) == (engine.owner, 1)
        await until(lambda: engine.state(eager).status == "completed", "the eager run")
        lazy, _ = engine.start(looping, {"n": 3}, eager=False)
        row = store.get_run("default", lazy)
        assert row is not None and row.lease_owner is None
        assert worker.eager_starts == 1
        worker.stop()
        await task
        assert engine.state(eager).result == 3
        assert engine.journal.verify("default", eager).ok

    asyncio.run(scenario())


def test_a_full_worker_or_a_run_not_yet_due_leaves_the_run_to_a_claim(store: Store) -> None:
    global GATE
    GATE = asyncio.Event()
    engine = new_engine(store)

    async def scenario() -> None:
        assert GATE is not None
        worker, task = serving(engine, concurrency=1)
        await worker.ready.wait()
        busy, _ = engine.start(holding, {})
        waiting, _ = engine.start(looping, {"n": 1})
        later, _ = engine.start(looping, {"n": 1}, start_at=time.time() + 3600)
        await until(lambda: worker.in_flight == 1, "the busy run to be driven")
        assert worker.eager_starts == 1
        for run_id in (waiting, later):
            row = store.get_run("default", run_id)
            assert row is not None and row.lease_owner is None
        GATE.set()
        await until(lambda: engine.state(waiting).status == "completed", "the claimed run")
        assert engine.state(busy).status == "completed"
        assert engine.state(later).status == "ready"
        worker.stop()
        await task

    asyncio.run(scenario())


def test_a_start_while_a_claim_is_out_never_takes_the_worker_past_its_concurrency(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run started while a claim is out may take the free slot eagerly; what the claim
    then brings back finds no slot and goes back at once, so the worker never drives more
    runs than its concurrency."""
    global GATE
    GATE = asyncio.Event()
    engine = new_engine(store)
    first, _ = engine.start(holding, {})  # due before the worker exists: its claim takes it
    entered, may_go, returned = threading.Event(), threading.Event(), threading.Event()

    async def scenario() -> None:
        assert GATE is not None
        worker = Worker(engine, poll=60, min_poll=60, listen=False, concurrency=1)
        claim = worker._claim

        def held_claim(limit: int) -> list[Lease]:
            entered.set()
            assert may_go.wait(PATIENCE_S), "the test never let the claim go"
            leases = claim(limit)
            returned.set()
            return leases

        monkeypatch.setattr(worker, "_claim", held_claim)
        task = asyncio.create_task(worker.run())
        await until(entered.is_set, "the worker's first claim")
        second, _ = engine.start(holding, {})
        await until(lambda: worker.eager_starts == 1, "the eager start")
        may_go.set()
        await worker.ready.wait()

        def handed_back() -> bool:
            row = store.get_run("default", first)
            return returned.is_set() and row is not None and row.lease_owner is None

        await until(handed_back, "the claimed run to go back")
        assert worker.in_flight == 1
        row = store.get_run("default", second)
        assert row is not None and row.lease_owner is not None
        GATE.set()
        await until(lambda: engine.state(first).status == "completed", "the first run")
        assert engine.state(second).status == "completed"
        worker.stop()
        await task

    asyncio.run(scenario())


def test_a_child_run_goes_to_the_worker_its_parent_runs_in(store: Store) -> None:
    engine = new_engine(store)

    async def scenario() -> None:
        worker, task = serving(engine, concurrency=2)
        await worker.ready.wait()
        run_id, _ = engine.start(parent, {"n": 2})
        await until(lambda: engine.state(run_id).status == "completed", "the parent")
        assert engine.state(run_id).result == 2
        assert worker.eager_starts == 2
        worker.stop()
        await task

    asyncio.run(scenario())


def test_a_cancel_sent_before_the_run_existed_is_read_by_its_eager_activation(
    store: Store,
) -> None:
    engine = new_engine(store)
    store.send_signal(SignalRecord("default", "early", "cancel:p", CANCEL,
                                   b'{"by": "operator", "reason": "before it began"}',
                                   "operator", time.time()))

    async def scenario() -> None:
        worker, task = serving(engine)
        await worker.ready.wait()
        engine.start(looping, {"n": 3}, run_id="early")
        await until(lambda: engine.state("early").status == "cancelled", "the cancel")
        assert worker.eager_starts == 1
        worker.stop()
        await task

    asyncio.run(scenario())
    assert "StepStarted" not in types(engine, "early")


def test_run_starts_eagerly_and_journals_what_a_claimed_run_journals(store: Store) -> None:
    engine = new_engine(store)
    eager = asyncio.run(uw.run(engine, looping, {"n": 4}))
    lazy = asyncio.run(uw.run(engine, looping, {"n": 4}, eager=False))
    assert eager.status == lazy.status == "completed" and eager.result == lazy.result == 4
    assert types(engine, eager.run_id) == types(engine, lazy.run_id)
    row = store.get_run("default", eager.run_id)
    assert row is not None and row.lease_token == 1 and row.lease_owner is None
    assert engine.state(eager.run_id) == eager
    # An idempotent repeat finds the finished run and drives nothing.
    again = asyncio.run(uw.run(engine, looping, {"n": 4}, idempotency_key="k"))
    assert asyncio.run(uw.run(engine, looping, {"n": 4}, idempotency_key="k")) == again


def test_a_run_started_for_a_worker_that_stopped_meanwhile_is_handed_back(
    store: Store,
) -> None:
    engine = new_engine(store)

    async def scenario() -> str:
        worker, task = serving(engine)
        await worker.ready.wait()
        assert worker.reserve()  # a start took a slot...
        worker.stop()  # ...and the worker stopped before the run was handed to it
        await task
        start = engine.start_leased(engine.prepare_start(looping, {"n": 1}))
        assert start.lease is not None
        worker.adopt(start)
        assert worker.eager_starts == 0 and worker.in_flight == 0
        return start.run_id

    run_id = asyncio.run(scenario())
    row = store.get_run("default", run_id)
    assert row is not None and row.lease_owner is None and row.status == "ready"
    [lease] = engine.claim(run_id=run_id)
    assert lease.token == 2
