"""Flows whose journals hold every kind of event the console's run page shows, driven by a
worker of their own over a service world (tests/fakes/service_world.py):

- ``journey``: reads the clock, calls ``lookup`` (allowed by policy rule
  ``lookups-allowed``; its result holds markup), asks a model, starts a detached
  ``helper`` child, sleeps a minute, waits for the signal ``go``, then asks a person;
- ``laps``: ``laps`` steps, each calling the read-only ``tick`` (three events a step), so
  a run can be as long as a test needs (checkpointed every 100 events);
- ``pause``: waits for ``go`` (the run leaves the worker: a checkpoint), then calls
  ``hold``, which stays in flight until the test opens :data:`GATE` — its intent and the
  step's start are journaled after the checkpoint, ahead of the run's row.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pydantic import BaseModel

import underway as uw
from fakes.invoice_flows import refunds, reminders
from fakes.service_world import World
from underway.effects import ModelReply
from underway.guard.policy import policy_from_dict
from underway.runner import Runner

MARKUP = "<script>alert(1)</script>"
"""What ``lookup`` returns inside its result: the page must show it as text."""
MODEL = "claude-test-1"


class Trip(BaseModel):
    invoice: str
    amount: int = 5


class Notes(BaseModel):
    seen: list[str] = []


class Laps(BaseModel):
    laps: int


class Count(BaseModel):
    n: int = 0


class Quoter:
    """A model that always answers the same, with fixed usage."""

    name = "quoter"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": "looks fine"}, MODEL, 120, 30, 0.0125)


@uw.tool(idempotent=True)
async def lookup(args: Trip) -> dict[str, Any]:
    """Look an invoice up."""
    return {"invoice": args.invoice, "note": MARKUP}


@uw.tool(read_only=True)
async def tick(args: Count) -> int:
    """Count."""
    return args.n + 1


helper: uw.Flow[Notes, Trip] = uw.Flow("helper", state=Notes, input=Trip)


@helper.step
async def help_out(ctx: uw.RunContext[Notes, Trip]) -> Any:
    return ctx.done({"helped": ctx.input.invoice})


POLICY = policy_from_dict({"version": "v7", "rules": [
    {"id": "lookups-allowed", "tools": ["lookup"], "outcome": "allow"}]})
journey: uw.Flow[Notes, Trip] = uw.Flow("journey", state=Notes, input=Trip, tools=[lookup],
                                        policy=POLICY, signals=["go"])


@journey.step
async def gather(ctx: uw.RunContext[Notes, Trip]) -> Any:
    ctx.now()
    found = await ctx.call(lookup, ctx.input.model_dump())
    ctx.state.seen.append(str(found["invoice"]))
    await ctx.model(Quoter(), {"prompt": f"is {ctx.input.invoice} fine?"})
    await ctx.start(helper, ctx.input.model_dump(), detached=True)
    return ctx.sleep(60, then=listen)


@journey.step
async def listen(ctx: uw.RunContext[Notes, Trip]) -> Any:
    return ctx.wait("go", then=ask)


@journey.step
async def ask(ctx: uw.RunContext[Notes, Trip]) -> Any:
    answer = await ctx.ask("Refund it?", context={"invoice": ctx.input.invoice},
                           role="finance")
    return ctx.done({"answer": answer})


laps: uw.Flow[Count, Laps] = uw.Flow("laps", state=Count, input=Laps, tools=[tick])


@laps.step
async def lap(ctx: uw.RunContext[Count, Laps]) -> Any:
    ctx.state.n = await ctx.call(tick, {"n": ctx.state.n})
    return ctx.goto(lap) if ctx.state.n < ctx.input.laps else ctx.done({"laps": ctx.state.n})


class Gate:
    """Where ``hold`` stops: ``entered`` once its intent is journaled; it returns once
    ``opened``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()


GATE = Gate()


@uw.tool(idempotent=True)
async def hold(args: Count) -> int:
    """Stay in flight until the gate opens."""
    GATE.entered.set()
    await asyncio.to_thread(GATE.opened.wait, 60)
    return args.n


pause: uw.Flow[Count, Any] = uw.Flow("pause", state=Count, tools=[hold], signals=["go"])


@pause.step
async def wait_for_go(ctx: uw.RunContext[Count, Any]) -> Any:
    return ctx.wait("go", then=held)


@pause.step
async def held(ctx: uw.RunContext[Count, Any]) -> Any:
    ctx.state.n = await ctx.call(hold, {"n": 7})
    return ctx.done({"n": ctx.state.n})


FLOWS = [reminders, refunds, journey, helper, laps, pause]


def drive(world: World) -> None:
    """Run every ready run of the world to where it waits, with these flows."""
    engine = uw.Engine(world.worker_store, flows=FLOWS, clock=world.clock)
    asyncio.run(Runner(engine).run_until_idle())


def start(world: World, flow: str, input: dict[str, Any], *, tenant: str = "acme",
          key: str | None = None) -> str:
    """Start a run through the API (by name) and drive it."""
    headers = {"Idempotency-Key": key} if key else {}
    r = world.call("POST", "/v1/runs", tenant=tenant, role="operator", headers=headers,
                   json={"flow": flow, "input": input})
    assert r.status_code == 201, r.text
    drive(world)
    return str(r.json()["run_id"])


def journey_to_the_question(world: World) -> str:
    """A ``journey`` run taken through its timer and signal to the person's question."""
    run_id = start(world, "journey", {"invoice": "INV-9"}, key="trip-9")
    world.clock.advance(61)
    drive(world)
    r = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                   json={"name": "go", "payload": {"ok": "yes"}})
    assert r.status_code == 202, r.text
    drive(world)
    return run_id
