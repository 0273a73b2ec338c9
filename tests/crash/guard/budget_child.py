"""A process that spends a run's budget: one model call and one message per step.

    python budget_child.py URL RUN_ID LOG

Started twice by test_budget_crash.py: the first time it is killed mid-run (fault
injection), the second time it resumes the same run from the journal.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.effects import ModelReply
from underway.events import JSON
from underway.guard.budgets import Budget
from underway.runner import Runner
from underway.store import connect


class S(BaseModel):
    turns: int = 0


class Billed:
    """A model that costs 0.25 USD per call and logs every physical request."""

    name = "billed"

    def __init__(self, log: str) -> None:
        self.log = log

    async def complete(self, request: JSON) -> ModelReply:
        with open(self.log, "a") as f:
            f.write("model\n")
        return ModelReply({"ok": True}, "billed-1", 100, 20, 0.25)


def build(url: str, log: str) -> tuple[uw.Engine, uw.Flow[S, Any]]:
    model = Billed(log)

    @uw.tool(idempotent=True, message=True)
    async def send(args: dict[str, Any]) -> dict[str, Any]:
        return {"sent": args["turn"]}

    flow = uw.Flow("spender", state=S, tools=[send], budget=Budget(model_calls=4, messages=10))

    @flow.step
    async def spend(ctx: uw.RunContext[S, Any]) -> Any:
        await ctx.model(model, {"turn": ctx.state.turns})
        await ctx.call(send, {"turn": ctx.state.turns})
        ctx.state.turns += 1
        return ctx.goto(spend)

    return uw.Engine(connect(url), flows=[flow]), flow


def main() -> None:
    url, run_id, log = sys.argv[1:4]
    engine, flow = build(url, log)
    engine.start(flow, run_id=run_id, idempotency_key=run_id)
    asyncio.run(Runner(engine).run_until_idle())


if __name__ == "__main__":
    main()
