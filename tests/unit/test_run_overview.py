"""A run's overview read from its journal (``underway.ops.overview``), as the console's run
page and ``underway runs show`` draw it: a worker dies in a step and another runs it again,
a step dies and an operator resumes it. Each attempt keeps the worker that ran it, says
why it ran again, how long it took and the wait it ended in; the graph counts the
transitions taken, and a run that died and was resumed does not end where it died."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.client import Recorded
from underway.ops.overview import overview, short_worker
from underway.runner import Runner
from underway.store.memory import MemoryStore

WORKER_A, WORKER_B = "host-a:0f0f0f0f0f0f:11:1", "host-b:0e0e0e0e0e0e:22:2"


class Dies(BaseException):
    """Stands in for the worker's process dying while a tool runs."""


class Order(BaseModel):
    n: int = 0


CRASH: list[bool] = []
BROKEN: list[bool] = []


@uw.tool(idempotent=True)
async def reserve(args: Order) -> dict[str, Any]:
    """Reserve stock."""
    if CRASH:
        CRASH.pop()
        raise Dies
    return {"reserved": args.n}


ship: uw.Flow[Order, Any] = uw.Flow("ship", state=Order, tools=[reserve])


@ship.step
async def pick(ctx: uw.RunContext[Order, Any]) -> Any:
    await ctx.call(reserve, {"n": 3})
    return ctx.sleep(120, then=pack)


@ship.step
async def pack(ctx: uw.RunContext[Order, Any]) -> Any:
    if BROKEN:
        raise ValueError("label printer jammed")
    return ctx.done({"packed": True})


def _drive(store: MemoryStore, clock: uw.ManualClock, owner: str) -> None:
    engine = uw.Engine(store, flows=[ship], clock=clock, owner=owner)
    asyncio.run(Runner(engine).run_until_idle())


def test_each_attempt_keeps_its_worker_and_why_it_ran_again() -> None:
    store, clock = MemoryStore(), uw.ManualClock(1_000.0)
    client = uw.Client(store, clock=clock)
    run_id, _ = client.start("ship", None)
    CRASH.append(True)
    with pytest.raises(Dies):
        _drive(store, clock, WORKER_A)
    clock.advance(3600)  # worker A's lease expires; worker B takes the run over
    BROKEN.append(True)
    _drive(store, clock, WORKER_B)
    clock.advance(121)
    _drive(store, clock, WORKER_B)
    assert client.get_run(run_id).status == "dead"
    BROKEN.clear()
    clock.advance(30)
    client.resume(run_id, by="ops")
    _drive(store, clock, WORKER_A)
    assert client.get_run(run_id).status == "completed"

    records = [Recorded(e.seq, e.at, e.event) for e in client.events(run_id)]
    seen = overview(records)
    run, crashed, again, died, resumed = seen.attempts
    assert run.title == "run" and run.worker is None
    assert (crashed.title, crashed.worker, crashed.outcome) == (
        "step pick", WORKER_A, "interrupted")
    assert (again.title, again.worker, again.outcome) == (
        "step pick, attempt 2 (again after an interruption)", WORKER_B, "-> pack")
    assert again.wait is not None and (again.wait.what, again.wait.outcome) == (
        "a timer", "timer fired")
    assert again.wait.end is not None and again.wait.end - again.wait.start == 121
    assert [c.label for c in again.calls] == ["tool reserve #0"]
    assert (died.title, died.worker, died.outcome) == ("step pack", WORKER_B, "dead")
    assert died.wait is not None and (died.wait.what, died.wait.outcome) == (
        "an operator", "resumed by ops")
    assert died.wait.end is not None and died.wait.end - died.wait.start == 30
    assert resumed.worker == WORKER_A and resumed.outcome == "-> end"
    assert resumed.title.startswith("step pack, attempt 2")
    assert seen.workers == {WORKER_A: 2, WORKER_B: 2}
    # Every event is in exactly one row.
    assert seen.attempts[0].first_seq == 1
    assert all(a.last_seq + 1 == b.first_seq for a, b in pairwise(seen.attempts))
    assert seen.attempts[-1].last_seq == records[-1].seq

    graph = seen.graph
    assert graph.steps == ("pick", "pack") and graph.ended == "completed"
    assert graph.about == {"pick": "2 attempts", "pack": "2 attempts · an operator"}
    # The run died in pack and was resumed: it ended by completing, once.
    assert [(e.source, e.target, e.count, e.waits) for e in graph.edges] == [
        ("pick", "pack", 1, ("a timer",)), ("pack", "end", 1, ())]
    assert short_worker(WORKER_B) == "host-b pid 22" and short_worker(None) == "-"


def test_the_graph_lists_declared_steps_and_the_one_the_run_is_at() -> None:
    store, clock = MemoryStore(), uw.ManualClock(1_000.0)
    client = uw.Client(store, clock=clock)
    run_id, _ = client.start("ship", None)
    _drive(store, clock, WORKER_A)
    records = [Recorded(e.seq, e.at, e.event) for e in client.events(run_id)]
    seen = overview(records, declared=["pick", "pack", "label"], now=1_060.0)
    assert seen.graph.steps == ("pick", "pack", "label")
    # It sleeps before pack: pack is where it is, not yet taken.
    assert seen.graph.visited == {"pick"} and seen.graph.current == "pack"
    assert seen.graph.ended is None
    # The run sleeps: its wait is open, drawn up to now.
    (_, pick_row) = seen.attempts
    assert pick_row.wait is not None and pick_row.wait.end is None and seen.end == 1_060.0
