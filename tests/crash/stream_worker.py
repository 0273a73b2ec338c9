"""Child process for the streaming crash test: drive a run whose step streams a model call
from a local OpenAI wire server, until the run is final.

    python tests/crash/stream_worker.py --db URL --base-url URL --run RUN_ID [--anthropic]

The test kills it with SIGKILL while the model is mid-answer (the server holds the stream
after a few words). The next process takes the run over once the lease expires and makes
the call again.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.guard.budgets import Budget
from underway.models import (
    AnthropicMessages,
    Message,
    ModelRequest,
    OpenAIChat,
    Price,
    PriceTable,
)


class S(BaseModel):
    pass


def story_flow(model: OpenAIChat | AnthropicMessages) -> uw.Flow[S, Any]:
    """One step: a streamed model call under a budget of exactly one model call."""
    flow = uw.Flow("story", state=S, budget=Budget(model_calls=1, cost_usd=1.0,
                                                   on_exceed="fail"))

    @flow.step(start=True)
    async def tell(ctx: uw.RunContext[S, Any]) -> Any:
        reply = await ctx.model(model, ModelRequest(
            messages=[Message.user("A short story")], max_tokens=64).to_json(), stream=True)
        return ctx.done(reply)

    return flow


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--anthropic", action="store_true")
    a = p.parse_args()
    prices = PriceTable({"gpt-4o-mini*": Price(input=0.15, output=0.60),
                         "claude-sonnet-4*": Price(input=3.0, output=15.0)})
    model: OpenAIChat | AnthropicMessages = (
        AnthropicMessages("claude-sonnet-4-20250514", api_key="sk-ant-test",
                          base_url=a.base_url.removesuffix("/v1"), prices=prices)
        if a.anthropic else
        OpenAIChat("gpt-4o-mini", api_key="sk-test", base_url=a.base_url, prices=prices))
    engine = uw.Engine(uw.connect(a.db), flows=[story_flow(model)], lease_ttl=1.0)

    async def run() -> None:
        async with model:
            await uw.Runner(engine, poll=0.05).run_until_complete(a.run)

    asyncio.run(run())


if __name__ == "__main__":
    main()
