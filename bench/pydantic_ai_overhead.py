"""The overhead of a pydantic-ai agent run on underway, against the same agent run bare.

One agent, one ``FunctionModel`` (it answers at once): ``CALLS`` read-only tool calls, one
per model turn, then the answer: ``CALLS + 1`` model requests. Bare, it is
``await agent.run(prompt)``. Durable, it is a run of :class:`DurableAgent` started and
driven to completion by a :class:`~underway.Runner`: every request journaled as a model
call, every tool call through the guard, the run's start, step and end committed. Both are
timed in the same process, one after the other, as the median of ``RUNS`` runs; the ratio
is durable over bare.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir
from underway.integrations.pydantic_ai import DurableAgent

CALLS = 3
RUNS = 50
TARGETS = {"memory": 4.0, "sqlite": 8.0, "postgres": 10.0}
"""The most a durable run may cost, as a multiple of the bare run. A bare run of this
agent takes a few milliseconds of pure Python; durable adds a journaled model call per
request, the guard per tool call and three commits per run."""


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    if done < CALLS:
        return ModelResponse(parts=[ToolCallPart("balance", {"account": f"ACC-{done}"})])
    return ModelResponse(parts=[TextPart(f"checked {done} accounts")])


def make_agent() -> Agent[None, str]:
    """The agent both runs use."""
    agent = Agent(FunctionModel(_model), instructions="Check the accounts.")

    @agent.tool_plain
    def balance(account: str) -> dict[str, Any]:
        """An account's balance."""
        return {"account": account, "balance": 1200}

    return agent


async def _bare(agent: Agent[None, str]) -> list[float]:
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        result = await agent.run("check")
        times.append(time.perf_counter() - began)
        assert result.output == f"checked {CALLS} accounts"
    return times


async def _durable(engine: uw.Engine, durable: DurableAgent, runs: int = 0) -> list[float]:
    runner = uw.Runner(engine, poll=0.01)
    times = []
    for _ in range(runs or RUNS):
        began = time.perf_counter()
        run_id, _ = engine.start(durable.flow, {"prompt": "check"})
        await runner.run_until_idle()
        times.append(time.perf_counter() - began)
        assert engine.state(run_id).result == f"checked {CALLS} accounts"
    return times


def _measure(url: str, db: str) -> list[Figure]:
    agent = make_agent()
    durable = DurableAgent(agent, name="accounts",
                           tools={"balance": {"mutating": False, "trusted_output": True}})
    store = uw.connect(url)
    engine = uw.Engine(store, flows=[durable.flow])
    try:
        # A first run of each warms imports and caches; it is not counted.
        asyncio.run(agent.run("check"))
        asyncio.run(_durable(engine, durable, runs=1))
        bare = median(asyncio.run(_bare(agent))) * 1e3
        on = median(asyncio.run(_durable(engine, durable))) * 1e3
    finally:
        store.close()
    ratio = on / bare
    per = (on - bare) / (2 * CALLS + 1)
    return [Figure(
        f"{db}.pydantic_ai_run", on, "ms", bare, ratio, f"<= {TARGETS[db]}",
        ratio <= TARGETS[db],
        note=f"{CALLS + 1} model requests and {CALLS} tool calls a run; about {per:.2f} ms "
             "more per request or call than bare",
    )]


def bench_memory() -> list[Figure]:
    """Durable against bare, with the in-memory store."""
    return _measure("memory://", "memory")


def bench_sqlite() -> list[Figure]:
    """Durable against bare, on SQLite."""
    with sqlite_dir() as d:
        return _measure(f"sqlite:///{d}/pai.db", "sqlite")


def bench_postgres() -> list[Figure]:
    """Durable against bare, on PostgreSQL."""
    if pg_store_missing():
        return []
    with pg_schema() as (_, url):
        return _measure(url, "postgres")
