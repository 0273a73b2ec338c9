"""Flows whose runs give the metrics page something to count: ``metered`` asks a model once
(100 tokens in, 20 out, $0.25) and completes; ``thrifty`` may ask once but asks twice, so
its budget escalates it; ``asking`` asks a person a question (an escalation); ``broken``
raises, so its run is dead-lettered."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.effects import ModelReply

TOKENS_IN, TOKENS_OUT, COST = 100, 20, 0.25
"""What one call of :class:`FixedModel` is charged."""


class Job(BaseModel):
    invoice: str = ""
    amount: int = 0


class Seen(BaseModel):
    replies: int = 0


class FixedModel:
    """A model that answers at once, charged the same every time."""

    name = "fixed-model"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": "ok"}, self.name, TOKENS_IN, TOKENS_OUT, COST)


metered: uw.Flow[Seen, Job] = uw.Flow("metered", state=Seen, input=Job)


@metered.step
async def ask_model(ctx: uw.RunContext[Seen, Job]) -> Any:
    await ctx.model(FixedModel(), {"prompt": f"summarise {ctx.input.invoice}"})
    return ctx.done({"ok": True})


thrifty: uw.Flow[Seen, Job] = uw.Flow("thrifty", state=Seen, input=Job,
                                      budget=uw.Budget(model_calls=1))


@thrifty.step
async def ask_twice(ctx: uw.RunContext[Seen, Job]) -> Any:
    await ctx.model(FixedModel(), {"prompt": "first"})
    await ctx.model(FixedModel(), {"prompt": "second"})
    return ctx.done({"ok": True})


asking: uw.Flow[Seen, Job] = uw.Flow("asking", state=Seen, input=Job)


@asking.step
async def ask_person(ctx: uw.RunContext[Seen, Job]) -> Any:
    answer = await ctx.ask("Which account should this invoice go to?", role="finance")
    return ctx.done({"account": answer})


broken: uw.Flow[Seen, Job] = uw.Flow("broken", state=Seen, input=Job)


@broken.step
async def crash(ctx: uw.RunContext[Seen, Job]) -> Any:
    raise RuntimeError("the ledger is unreachable")


FLOWS = [metered, thrifty, asking, broken]
