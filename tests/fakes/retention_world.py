"""Runs whose journals carry personal data, for the retention tests: each writes canaries
(an Aadhaar-, a PAN- and a phone-like number) into its input, a call's arguments and
result (large enough to be stored as blobs), a model's request and response, its state, a
signal, its result or its failure's reason.

- ``letter``: calls ``send_letter`` (mutating, idempotent) and a model, waits for the
  signal ``sent``, completes with a result that quotes the canary;
- ``doomed``: fails with a reason that quotes the canary;
- ``waiting``: waits for ``go`` forever (a live run: never purged, its blobs kept).

:func:`make_runs` starts and drives one of each (two letters, one about subject ``ann``)
with an engine whose clock stands at :data:`THEN`, long ago.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.effects import ModelReply
from underway.store import Store

CANARIES = ("2345 6789 0123", "ABCDE1234F", "+91 98765 43210")
"""Aadhaar-, PAN- and phone-like values no skeleton may keep."""
PERSON = " / ".join(CANARIES)
THEN = 1_600_000_000.0
"""When the runs of :func:`make_runs` ran (September 2020)."""
DAY = 86_400.0


class Person(BaseModel):
    who: str = PERSON


class Letter(BaseModel):
    text: str


class Notes(BaseModel):
    sent: str = ""
    reply: str = ""


@uw.tool(idempotent=True)
async def send_letter(args: Letter) -> dict[str, Any]:
    """Send a letter; the result repeats it (large: a blob)."""
    return {"receipt": args.text * 2}


class Scribe:
    """A model that answers with the person's details."""

    name = "scribe"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": f"Dear {PERSON}"}, "scribe-1", 40, 12, 0.002)


letter: uw.Flow[Notes, Person] = uw.Flow("letter", state=Notes, input=Person,
                                         signals=["sent"])


@letter.step
async def write(ctx: uw.RunContext[Notes, Person]) -> Any:
    receipt = await ctx.call(send_letter, {"text": f"To {ctx.input.who}. " * 40})
    reply = await ctx.model(Scribe(), {"prompt": f"greet {ctx.input.who}"})
    ctx.state.sent = str(receipt)[:200]
    ctx.state.reply = str(reply)
    return ctx.wait("sent", then=wrap_up)


@letter.step
async def wrap_up(ctx: uw.RunContext[Notes, Person]) -> Any:
    return ctx.done({"to": ctx.input.who, "signal": ctx.signal})


doomed: uw.Flow[Notes, Person] = uw.Flow("doomed", state=Notes, input=Person)


@doomed.step
async def give_up(ctx: uw.RunContext[Notes, Person]) -> Any:
    return ctx.fail(f"could not reach {ctx.input.who}")


waiting: uw.Flow[Notes, Person] = uw.Flow("waiting", state=Notes, input=Person,
                                          signals=["go"])


@waiting.step
async def hold_on(ctx: uw.RunContext[Notes, Person]) -> Any:
    await ctx.call(send_letter, {"text": f"Pending for {ctx.input.who}. " * 40})
    return ctx.wait("go", then=hold_on)


FLOWS = [letter, doomed, waiting]
TOOLS = [send_letter]


def engine_for(store: Store, *, at: float = THEN) -> tuple[uw.Engine, uw.ManualClock]:
    """An engine with the flows on ``store``, its clock at ``at``."""
    clock = uw.ManualClock(at)
    return uw.Engine(store, flows=FLOWS, tools=TOOLS, clock=clock), clock


def start(engine: uw.Engine, flow: str, *, tenant: str = "default",
          subject: str | None = None, who: str = PERSON) -> str:
    """Start a run of ``flow`` for ``who``, about ``subject``."""
    new = engine.client.prepare_start(flow, {"who": who}, tenant_id=tenant, subject=subject)
    run, _ = engine.store.create_run(new)
    return run.run_id


def make_runs(store: Store, *, tenant: str = "default", at: float = THEN) -> dict[str, str]:
    """Runs at time ``at``: ``letter`` and ``letter_ann`` (about subject ``ann``)
    completed, ``doomed`` failed, ``waiting`` waits; by name."""
    engine, _ = engine_for(store, at=at)
    runs = {
        "letter": start(engine, "letter", tenant=tenant),
        "letter_ann": start(engine, "letter", tenant=tenant, subject="ann"),
        "doomed": start(engine, "doomed", tenant=tenant),
        "waiting": start(engine, "waiting", tenant=tenant),
    }
    asyncio.run(uw.Runner(engine).run_until_idle())
    for name in ("letter", "letter_ann"):
        engine.signal(runs[name], "sent", {"by": PERSON}, tenant_id=tenant)
    asyncio.run(uw.Runner(engine).run_until_idle())
    for name, status in (("letter", "completed"), ("letter_ann", "completed"),
                         ("doomed", "failed"), ("waiting", "waiting")):
        row = store.get_run(tenant, runs[name])
        assert row is not None and row.status == status, (name, row)
    return runs
