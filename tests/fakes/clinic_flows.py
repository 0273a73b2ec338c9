"""Flows for the run page's overview, over a service world (tests/fakes/service_world.py),
each activation run by a worker with an owner id of the test's choosing:

- ``clinic``: a reminder in Hindi and Tamil. ``remind`` sends it (the idempotent
  ``send_sms``) and asks a model; it sleeps 30 s into ``confirm``, which waits for the
  signal ``confirmed``, then ``close`` ends the run. ``call_patient`` is declared and
  never taken;
- ``doomed``: its one step raises, so the run is dead and waits for an operator.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import underway as uw
from fakes.service_world import World
from underway.effects import ModelReply
from underway.runner import Runner

PATIENT = "सीता देवी"
"""A patient's name in Hindi (Devanagari)."""
MESSAGE = "நாளை காலை 10 மணிக்கு மருத்துவர் சந்திப்பு"
"""The reminder, in Tamil."""
MODEL = "clinic-model-1"


class Visit(BaseModel):
    patient: str
    message: str


class Notes(BaseModel):
    sent: str = ""


class Echo:
    """A model that answers with the reminder."""

    name = "echo"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": MESSAGE}, MODEL, 40, 12, 0.002)


@uw.tool(idempotent=True)
async def send_sms(args: Visit) -> dict[str, Any]:
    """Send a reminder."""
    return {"to": args.patient, "text": args.message, "status": "queued"}


clinic: uw.Flow[Notes, Visit] = uw.Flow("clinic", state=Notes, input=Visit, tools=[send_sms],
                                        signals=["confirmed"])


@clinic.step
async def remind(ctx: uw.RunContext[Notes, Visit]) -> Any:
    sent = await ctx.call(send_sms, ctx.input.model_dump())
    ctx.state.sent = str(sent["text"])
    await ctx.model(Echo(), {"prompt": ctx.input.message})
    return ctx.sleep(30, then=confirm)


@clinic.step
async def confirm(ctx: uw.RunContext[Notes, Visit]) -> Any:
    return ctx.wait("confirmed", timeout=3600, then=close)


@clinic.step
async def call_patient(ctx: uw.RunContext[Notes, Visit]) -> Any:
    return ctx.goto(close)


@clinic.step
async def close(ctx: uw.RunContext[Notes, Visit]) -> Any:
    return ctx.done({"patient": ctx.input.patient, "reminded": ctx.state.sent})


doomed: uw.Flow[Notes, Visit] = uw.Flow("doomed", state=Notes, input=Visit)


@doomed.step
async def parse(ctx: uw.RunContext[Notes, Visit]) -> Any:
    raise ValueError(f"cannot read the visit of {ctx.input.patient}")


FLOWS = [clinic, doomed]


def drive(world: World, owner: str) -> None:
    """Run every ready run of the world to where it waits, as worker ``owner``."""
    engine = uw.Engine(world.worker_store, flows=FLOWS, clock=world.clock, owner=owner)
    asyncio.run(Runner(engine).run_until_idle())


def start(world: World, flow: str, owner: str, *, message: str = MESSAGE) -> str:
    """Start a run of ``flow`` by name through the API and drive it as ``owner``."""
    r = world.call("POST", "/v1/runs", role="operator",
                   json={"flow": flow, "input": {"patient": PATIENT, "message": message}})
    assert r.status_code == 201, r.text
    drive(world, owner)
    return str(r.json()["run_id"])


def confirmed_visit(world: World, *, message: str = MESSAGE) -> str:
    """A ``clinic`` run: its first step on worker-a, the rest on worker-b, the patient's
    confirmation 45 s after the timer fired."""
    run_id = start(world, "clinic", "host-a:0f0f0f0f0f0f:101:5", message=message)
    world.clock.advance(31)
    drive(world, "host-b:0e0e0e0e0e0e:202:7")
    world.clock.advance(45)
    r = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                   json={"name": "confirmed", "payload": {"by": PATIENT}})
    assert r.status_code == 202, r.text
    drive(world, "host-b:0e0e0e0e0e0e:202:7")
    return run_id
