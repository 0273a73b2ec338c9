"""Child runs on every backend: a step starts another flow's run once and waits for its end
holding no worker; failures and cancellations reach the parent; cancelling a parent cancels
its children (recursively) unless they were started detached; a run waits only for its own
children."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel
from store_backends import Backend

import underway as uw
from underway import events as ev
from underway.errors import RunNotFound
from underway.journal.state import RunState
from underway.testing import ManualClock

TENANT = "acme"


class Job(BaseModel):
    n: int = 0
    mode: str = "ok"


class Seen(BaseModel):
    child: str = ""
    outcome: Any = None
    attempts: list[int] = []


def flows() -> list[uw.Flow[Any, Any]]:
    child = uw.Flow("child", state=Seen, input=Job, signals=["go"])

    @child.step(start=True)
    async def work(ctx: uw.RunContext[Seen, Job]) -> Any:
        if ctx.input.mode == "wait":
            return ctx.wait("go", then=finish)
        if ctx.input.mode == "fail":
            return ctx.fail(f"cannot do {ctx.input.n}")
        if ctx.input.mode == "crash":
            raise RuntimeError(f"bug on {ctx.input.n}")
        if ctx.input.mode == "nest":
            grandchild = await ctx.start("child", {"n": ctx.input.n, "mode": "wait"})
            outcome = await ctx.wait_for(grandchild)
            return ctx.done(outcome.status)
        return ctx.done({"double": ctx.input.n * 2})

    @child.step
    async def finish(ctx: uw.RunContext[Seen, Job]) -> Any:
        return ctx.done({"double": ctx.input.n * 2, "signal": ctx.signal})

    parent = uw.Flow("parent", state=Seen, input=Job)

    @parent.step(start=True)
    async def delegate(ctx: uw.RunContext[Seen, Job]) -> Any:
        ctx.state.attempts.append(ctx.attempt)
        if ctx.input.mode == "detached":
            await ctx.start("child", {"n": 1, "mode": "wait"}, detached=True)
        if ctx.input.mode == "stranger":
            await ctx.wait_for(ctx.input.mode)
        mode = {"detached": "wait", "nest": "nest"}.get(ctx.input.mode, ctx.input.mode)
        ctx.state.child = await ctx.start("child", Job(n=ctx.input.n, mode=mode))
        outcome = await ctx.wait_for(ctx.state.child)
        ctx.state.outcome = {"status": outcome.status, "result": outcome.result,
                             "error": outcome.error, "ok": outcome.ok}
        return ctx.done(ctx.state.outcome)

    later = uw.Flow("later", state=Seen, input=Job)

    @later.step(start=True)
    async def begin(ctx: uw.RunContext[Seen, Job]) -> Any:
        ctx.state.child = await ctx.start("child", {"n": ctx.input.n}, key="the-one")
        return ctx.sleep(60, then=collect)

    @later.step
    async def collect(ctx: uw.RunContext[Seen, Job]) -> Any:
        again = await ctx.start("child", {"n": ctx.input.n}, key="the-one")
        outcome = await ctx.wait_for(again)
        return ctx.done({"same": again == ctx.state.child, "result": outcome.result})

    loop = uw.Flow("loop", state=Seen, input=Job)

    @loop.step(start=True)
    async def visit(ctx: uw.RunContext[Seen, Job]) -> Any:
        child = await ctx.start("child", {"n": len(ctx.state.attempts)})
        outcome = await ctx.wait_for(child)
        ctx.state.attempts.append(outcome.result["double"])
        if len(ctx.state.attempts) < 3:
            return ctx.goto(visit)
        return ctx.done(ctx.state.attempts)

    return [child, parent, later, loop]


def engine_on(backend: Backend) -> tuple[uw.Engine, uw.Runner, ManualClock]:
    clock = ManualClock(1_700_000_000.0)
    engine = uw.Engine(backend.open(), flows=flows(), clock=clock)
    return engine, uw.Runner(engine), clock


def types(engine: uw.Engine, run_id: str) -> list[str]:
    return [type(r.event).__name__ for r in engine.client.history(run_id, tenant_id=TENANT)]


def attached(engine: uw.Engine, run_id: str) -> str:
    """The child the run started without ``detached`` (a step that waits has not
    journaled its state yet: the journal's record of its children says)."""
    [child] = [c.run_id for c in engine.client.children(run_id, tenant_id=TENANT)
               if not c.detached]
    return child


def runs_of(engine: uw.Engine, flow: str) -> list[uw.store.RunRecord]:
    return engine.client.list_runs(tenant_id=TENANT, flow=flow).runs


def test_a_parent_waits_for_its_child_holding_no_worker_and_gets_its_result(
    backend: Backend,
) -> None:
    engine, runner, _ = engine_on(backend)
    parent, _ = engine.start("parent", {"n": 21}, tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(parent, tenant_id=TENANT))

    assert state.status == "completed"
    assert state.result == {"status": "completed", "result": {"double": 42}, "error": None,
                            "ok": True}
    [child] = runs_of(engine, "child")
    assert child.status == "completed"
    assert engine.state(child.run_id, tenant_id=TENANT).parent_run_id == parent
    # The step ran, waited holding no worker (its state changes not journaled: it did not
    # complete), and ran again with the outcome; the re-run started no second child.
    assert state.state["attempts"] == [2]
    assert types(engine, parent).count("ChildStarted") == 1
    assert "ChildAwaited" in types(engine, parent)
    assert "ChildFinished" in types(engine, parent)
    assert engine.client.verify(parent, tenant_id=TENANT).ok


def test_the_parent_is_parked_while_its_child_waits(backend: Backend) -> None:
    engine, runner, _ = engine_on(backend)
    parent, _ = engine.start("parent", {"n": 5, "mode": "detached"}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    row = engine.client.get_run(parent, tenant_id=TENANT)
    assert row.status == "waiting" and row.lease_owner is None and row.next_wake_at is None
    state = engine.state(parent, tenant_id=TENANT)
    assert state.awaiting_child == attached(engine, parent)

    engine.signal(attached(engine, parent), "go", "now", tenant_id=TENANT)
    done = asyncio.run(runner.run_until_complete(parent, tenant_id=TENANT))
    assert done.result["result"] == {"double": 10, "signal": "now"}


def test_the_client_lists_a_runs_children_as_they_start_and_end(backend: Backend) -> None:
    engine, runner, _ = engine_on(backend)
    parent, _ = engine.start("parent", {"n": 4, "mode": "detached"}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    # A client with no flow code reads the same children as the engine.
    client = uw.Client(engine.store)
    listed = client.children(parent, tenant_id=TENANT)
    assert [(c.flow, c.detached, c.status, c.ended) for c in listed] == [
        ("child", True, "waiting", False), ("child", False, "waiting", False),
    ]
    assert len({c.key for c in listed}) == 2 and all(c.key for c in listed)
    waited = attached(engine, parent)

    engine.signal(waited, "go", "now", tenant_id=TENANT)
    asyncio.run(runner.run_until_complete(parent, tenant_id=TENANT))
    ended = {c.run_id: c for c in client.children(parent, tenant_id=TENANT)}
    assert ended[waited].ended and ended[waited].status == "completed"
    assert ended[waited].result == {"double": 8, "signal": "now"}
    [detached] = [c for c in ended.values() if c.detached]
    assert not detached.ended and detached.status == "waiting"  # it outlives its parent
    # The records survive a checkpoint: a state rebuilt from its JSON lists the same.
    state = engine.state(parent, tenant_id=TENANT)
    assert RunState.from_json(json.loads(json.dumps(state.to_json()))) == state
    with pytest.raises(RunNotFound):
        client.children("no-such-run", tenant_id=TENANT)


def test_a_child_that_fails_or_is_cancelled_is_an_outcome_of_the_wait(backend: Backend) -> None:
    engine, runner, _ = engine_on(backend)
    failing, _ = engine.start("parent", {"n": 3, "mode": "fail"}, tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(failing, tenant_id=TENANT))
    assert state.status == "completed"
    assert state.result == {"status": "failed", "result": None, "error": "cannot do 3",
                            "ok": False}

    waiting, _ = engine.start("parent", {"n": 4, "mode": "wait"}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    child = attached(engine, waiting)
    engine.cancel(child, by="ops@acme", reason="not needed", tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(waiting, tenant_id=TENANT))
    assert state.result["status"] == "cancelled"
    assert state.result["error"] == "cancelled by ops@acme: not needed"


def test_a_child_that_ended_before_the_wait_is_returned_at_once(backend: Backend) -> None:
    engine, runner, clock = engine_on(backend)
    parent, _ = engine.start("later", {"n": 8}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    [child] = runs_of(engine, "child")
    assert child.status == "completed"
    clock.advance(60)
    state = asyncio.run(runner.run_until_complete(parent, tenant_id=TENANT))
    assert state.result == {"same": True, "result": {"double": 16}}
    assert "ChildAwaited" not in types(engine, parent)
    assert len(runs_of(engine, "child")) == 1


def test_cancelling_a_parent_cancels_its_children_but_not_detached_ones(
    backend: Backend,
) -> None:
    engine, runner, _ = engine_on(backend)
    parent, _ = engine.start("parent", {"n": 1, "mode": "detached"}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    children = engine.client.children(parent, tenant_id=TENANT)
    [detached] = [c.run_id for c in children if c.detached]
    child_id = attached(engine, parent)

    engine.cancel(parent, by="ops@acme", reason="customer left", tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    assert engine.client.get_run(parent, tenant_id=TENANT).status == "cancelled"
    assert engine.state(child_id, tenant_id=TENANT).status == "cancelled"
    [cancel] = [r.event for r in engine.client.history(child_id, tenant_id=TENANT)
                if isinstance(r.event, ev.RunCancelled)]
    assert cancel.by == "ops@acme"
    assert cancel.reason == f"parent run {parent} was cancelled: customer left"
    assert engine.client.get_run(detached, tenant_id=TENANT).status == "waiting"


def test_a_cancel_cascades_to_grandchildren(backend: Backend) -> None:
    engine, runner, _ = engine_on(backend)
    parent, _ = engine.start("parent", {"n": 2, "mode": "nest"}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    child = attached(engine, parent)
    grandchild = attached(engine, child)
    assert engine.client.get_run(grandchild, tenant_id=TENANT).status == "waiting"

    engine.cancel(parent, by="ops@acme", tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    for run_id in (parent, child, grandchild):
        assert engine.client.get_run(run_id, tenant_id=TENANT).status == "cancelled"


@pytest.mark.parametrize("stranger", ["unknown", "other-tenant", "not-mine"])
def test_waiting_for_a_run_that_is_not_a_child_is_a_clear_error(
    backend: Backend, stranger: str,
) -> None:
    engine, runner, _ = engine_on(backend)
    if stranger == "other-tenant":
        target, _ = engine.start("child", {"n": 1}, tenant_id="globex")
    elif stranger == "not-mine":
        target, _ = engine.start("child", {"n": 1}, tenant_id=TENANT)
    else:
        target = "no-such-run"

    wrong = uw.Flow("wrong", state=Seen)

    @wrong.step(start=True)
    async def wait(ctx: uw.RunContext[Seen, Any]) -> Any:
        await ctx.wait_for(target)
        return ctx.done()

    engine.register(wrong)
    run_id, _ = engine.start("wrong", tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(run_id, tenant_id=TENANT))
    assert state.status == "dead"
    assert state.error is not None
    assert f"waits for run {target}, which is not a child of this run" in state.error


def test_a_child_of_an_unknown_flow_is_refused_before_anything_is_journaled(
    backend: Backend,
) -> None:
    engine, runner, _ = engine_on(backend)
    typo = uw.Flow("typo", state=Seen)

    @typo.step(start=True)
    async def go(ctx: uw.RunContext[Seen, Any]) -> Any:
        await ctx.start("chlid", {})
        return ctx.done()

    engine.register(typo)
    run_id, _ = engine.start("typo", tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(run_id, tenant_id=TENANT))
    assert state.status == "dead" and "flow 'chlid'" in str(state.error)
    assert "ChildStarted" not in types(engine, run_id)


def test_a_loop_starts_a_new_child_on_each_visit_of_its_step(backend: Backend) -> None:
    engine, runner, _ = engine_on(backend)
    run_id, _ = engine.start("loop", tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(run_id, tenant_id=TENANT))
    assert state.result == [0, 2, 4]
    assert len(state.children) == 3 == len(runs_of(engine, "child"))


def test_a_dead_child_keeps_its_parent_waiting_until_an_operator_acts(backend: Backend) -> None:
    engine, runner, _ = engine_on(backend)
    parent, _ = engine.start("parent", {"n": 6, "mode": "crash"}, tenant_id=TENANT)
    asyncio.run(runner.run_until_idle())
    child = attached(engine, parent)
    assert engine.client.get_run(child, tenant_id=TENANT).status == "dead"
    assert engine.client.get_run(parent, tenant_id=TENANT).status == "waiting"

    engine.cancel(child, by="ops@acme", reason="bug filed", tenant_id=TENANT)
    state = asyncio.run(runner.run_until_complete(parent, tenant_id=TENANT))
    assert state.result["status"] == "cancelled"
    assert state.result["error"] == "cancelled by ops@acme: bug filed"
