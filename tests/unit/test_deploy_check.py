"""``check_deploy``: which unfinished runs new code would break, and why — every kind of
problem, every unfinished status, every tenant, many pages of runs; finished runs are left
alone and nothing is written."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.engine import Engine, Registry
from underway.ops.deploy import DeployReport, check_deploy, rerun_step
from underway.testing import ManualClock, MemoryStore


class Box(BaseModel):
    seen: list[str] = []


class Order(BaseModel):
    order_id: str = "o-1"


class Stock(BaseModel):
    sku: str
    count: int


class StockV2(BaseModel):
    sku: str
    count: int
    warehouse: str


@uw.tool(mutating=False)
async def stock(args: Any) -> Stock:
    return Stock(sku="s-1", count=3)


@uw.tool
async def reserve(args: Any) -> dict[str, Any]:
    return {"reserved": True}


def shop(*, reads: type[BaseModel] = Stock, raises: bool = False,
         input_model: type[BaseModel] = Order,
         reserving: uw.Tool = reserve) -> tuple[uw.Flow[Box, Any], uw.Tool]:
    """Look the stock up, then reserve — the reservation's retry parks the run mid-step."""

    async def look(args: Any) -> Any:
        return Stock(sku="s-1", count=3)

    looking: uw.Tool = uw.Tool(name="stock", fn=look, mutating=False, result_model=reads)
    flow = uw.Flow("shop", state=Box, input=input_model, tools=[looking, reserving])

    @flow.step(start=True)
    async def order(ctx: uw.RunContext[Box, Any]) -> Any:
        found = await ctx.call(looking, {})
        if raises:
            raise KeyError("count_v2")
        ctx.state.seen.append(str(found.count))
        await ctx.call(reserving, {"sku": found.sku})
        return ctx.sleep(60, then=ship)

    @flow.step
    async def ship(ctx: uw.RunContext[Box, Any]) -> Any:
        return ctx.done()

    return flow, looking


def mid_step(tenant: str = "default", runs: int = 1) -> tuple[MemoryStore, list[str]]:
    """Runs parked mid-step: their reservation failed and waits on a retry timer."""
    store = MemoryStore()
    store.migrate()
    clock = ManualClock(1.7e9)

    @uw.tool(name="reserve", retry=uw.RetryPolicy(max_attempts=3))
    async def busy(args: Any) -> dict[str, Any]:
        raise RuntimeError("warehouse busy")

    flow, _ = shop(reserving=busy)
    engine = Engine(store, flows=[flow], clock=clock)
    ids = [engine.start(flow, {}, tenant_id=tenant)[0] for _ in range(runs)]
    asyncio.run(uw.Runner(engine).run_until_idle())
    for run_id in ids:
        s = engine.state(run_id, tenant_id=tenant)
        assert s.status == "waiting" and [c.status for c in s.calls] == ["succeeded", "retry"]
    return store, ids


def check(store: MemoryStore, flow: uw.Flow[Any, Any], *tools: uw.Tool,
          **options: Any) -> DeployReport:
    return asyncio.run(check_deploy(store, [flow], list(tools), **options))


def test_unchanged_code_breaks_nothing_and_nothing_is_written() -> None:
    store, _ = mid_step(runs=2)
    before = store.journal_heads()
    flow, looking = shop()
    report = check(store, flow, looking)
    assert (report.ok, report.checked, report.rerun) == (True, 2, 2)
    assert store.journal_heads() == before


def test_a_journaled_result_that_no_longer_fits_its_model() -> None:
    store, (run_id,) = mid_step()
    flow, looking = shop(reads=StockV2)
    report = check(store, flow, looking)
    (found,) = report.broken
    assert (found.run_id, found.kind, found.step, found.status) == (
        run_id, "result", "order", "waiting")
    assert "no longer fits StockV2: warehouse" in found.problem


def test_a_step_that_fails_when_run_again() -> None:
    store, _ = mid_step()
    flow, looking = shop(raises=True)
    (found,) = check(store, flow, looking).broken
    assert found.kind == "error"
    assert "step 'order' raises KeyError when run again" in found.problem


def test_a_flow_the_new_code_lacks_and_an_input_that_no_longer_fits() -> None:
    store, _ = mid_step()
    other = uw.Flow("other", state=Box)

    @other.step
    async def only(ctx: uw.RunContext[Box, Any]) -> Any:
        return ctx.done()

    (gone,) = asyncio.run(check_deploy(store, [other])).broken
    assert gone.kind == "flow" and "flow 'shop' is not in the new code" in gone.problem

    class Stricter(BaseModel):
        order_id: int

    flow, looking = shop(input_model=Stricter)
    (bad,) = check(store, flow, looking).broken
    assert bad.kind == "input" and "no longer fits Stricter" in bad.problem

    # A run started by name, its input not checked by any worker yet, is checked now.
    client = uw.Client(store)
    waiting, _ = client.start("shop", {"order_id": "not a number"})
    found = {b.run_id: b.kind for b in check(store, flow, looking).broken}
    assert found[waiting] == "input"


def test_every_unfinished_run_in_every_tenant_page_by_page() -> None:
    store, parked = mid_step(tenant="acme", runs=5)
    flow, looking = shop()
    fragile = uw.Flow("fragile", state=Box)

    @fragile.step
    async def only(ctx: uw.RunContext[Box, Any]) -> Any:
        raise RuntimeError("bug")

    engine = Engine(store, flows=[flow, fragile], clock=ManualClock(1.7e9))
    cancelled, _ = engine.start(flow, {}, tenant_id="globex")
    between, _ = engine.start(flow, {}, tenant_id="globex")
    dead, _ = engine.start(fragile, {}, tenant_id="globex")
    engine.client.cancel(cancelled, by="ops", tenant_id="globex")
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert [engine.state(r, tenant_id="globex").status for r in (cancelled, between, dead)] \
        == ["cancelled", "waiting", "dead"]

    changed, _ = shop(reads=StockV2)
    report = asyncio.run(check_deploy(store, [changed, fragile], [looking], batch=2))
    # The five parked runs (three pages), globex's run parked between steps and its dead
    # run (an operator may resume it); the cancelled run is left alone.
    assert (report.checked, report.rerun) == (7, 5)
    assert sorted(b.run_id for b in report.broken) == sorted(parked)
    assert asyncio.run(check_deploy(store, [changed, fragile], tenants=["globex"])).ok
    progress: list[int] = []
    asyncio.run(check_deploy(store, [changed, fragile], batch=2, progress=progress.append))
    assert progress == sorted(progress) and progress[-1] == 7


def test_a_step_that_waits_on_something_outside_ctx_is_reported() -> None:
    store, (run_id,) = mid_step()
    flow = uw.Flow("shop", state=Box)
    never = asyncio.Event()

    @flow.step
    async def order(ctx: uw.RunContext[Box, Any]) -> Any:
        await ctx.call(stock, {})
        await never.wait()
        return ctx.done()

    registry = Registry()
    registry.register(flow)
    registry.tools["stock"] = stock
    state = uw.Client(store).state(run_id)
    found = asyncio.run(rerun_step(flow, state, registry, timeout=0.05))
    assert (found.ok, found.kind, found.calls) == (False, "timeout", 1)



def buggy_flow(looking: uw.Tool) -> uw.Flow[Box, Any]:
    """A flow whose step raises after its call: its runs die of their own bug."""
    buggy = uw.Flow("buggy", state=Box, tools=[looking])

    @buggy.step
    async def count(ctx: uw.RunContext[Box, Any]) -> Any:
        found = await ctx.call(looking, {})
        raise ValueError(f"cannot count {found.count}")

    return buggy

def dead_runs() -> tuple[MemoryStore, str, str]:
    """Two dead runs: one whose supplier kept failing (its retries spent, the step did not
    catch the failure), one whose step raised after its calls."""
    store = MemoryStore()
    store.migrate()
    clock = ManualClock(1.7e9)

    @uw.tool(name="reserve", retry=uw.RetryPolicy(max_attempts=1))
    async def down(args: Any) -> dict[str, Any]:
        raise RuntimeError("503 Service Unavailable")

    flow, looking = shop(reserving=down)
    engine = Engine(store, flows=[flow, buggy_flow(looking)], clock=clock)
    supplier, _ = engine.start(flow, {})
    bug, _ = engine.start("buggy", {})
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(supplier).status == engine.state(bug).status == "dead"
    return store, supplier, bug


def test_runs_dead_for_unrelated_reasons_are_judged_apart_and_break_nothing() -> None:
    store, supplier, bug = dead_runs()
    flow, looking = shop()
    report = asyncio.run(check_deploy(store, [flow, buggy_flow(looking)], [looking]))
    # The same code: nothing would break, and each dead run has its own verdict.
    assert report.ok and report.broken == [] and report.checked == 2
    verdicts = {r.run_id: (r.status, r.verdict) for r in report.stopped}
    # A resume runs the supplier's failed call again: the step gets that far again.
    assert verdicts[supplier] == ("dead", "resumes")
    # The step's own bug stops it again, as it stopped before: not the deploy's doing.
    assert verdicts[bug] == ("dead", "stops again")
    assert "ValueError" in next(r.why for r in report.stopped if r.run_id == bug)


def test_a_dead_run_the_new_code_cannot_continue_still_breaks() -> None:
    store, supplier, bug = dead_runs()
    flow, looking = shop()
    other = uw.Flow("buggy", state=Box, tools=[looking])

    @other.step
    async def count(ctx: uw.RunContext[Box, Any]) -> Any:
        await ctx.call(reserve, {"sku": "s-1"})  # another call where the journal has stock
        return ctx.done()

    report = asyncio.run(check_deploy(store, [flow, other], [looking, reserve]))
    assert [(b.run_id, b.status, b.kind) for b in report.broken] == [
        (bug, "dead", "nondeterminism")]
    assert [(r.run_id, r.verdict) for r in report.stopped] == [(supplier, "resumes")]
