"""A durable OpenAI Agents SDK run against the same agent run bare.

The refund desk of ``examples/openai_agents_agent`` answers "Where is order 1001?": two
model calls (the SDK's Chat Completions model, against the example's local model server)
and one read-only tool call. Bare: ``Runner.run`` of the agent, nothing journaled.
Durable: a run of its ``DurableAgent`` flow, started and driven to the end on the
database: two model responses and a tool result journaled, the step committed. Both talk
to the same local server over HTTP, so the ratio is what durability adds to a real agent
turn whose model answers at once (a hosted model's seconds would make it vanish).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable

import agents
from agents import Runner

import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir

# Appended, not put first: the examples' package names (``streaming``) must not hide the
# benches' own modules of the same names.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from openai_agents_agent.agent import durable_desk, model_client, refund_desk
from openai_agents_agent.model_server import ModelServer

RUNS = 40
QUESTION = "Where is order 1001?"
TARGETS = {"sqlite": 3.0, "postgres": 10.0}
"""The most a durable run may cost, as a ratio of the bare run (three local HTTP round
trips, about 5 ms). The durable run adds a start, a claim and three commits (each model
response, then the step with the tool result). A commit of events on PostgreSQL costs a
few milliseconds here (``<db>.agent_overhead_per_iteration`` measures two), on SQLite a
fraction of one."""


def _bare(url: str) -> float:
    async def go() -> float:
        client = model_client(url)
        agent = refund_desk(client)
        times = []
        for _ in range(RUNS):
            began = time.perf_counter()
            result = await Runner.run(agent, QUESTION)
            times.append(time.perf_counter() - began)
            assert result.final_output == "Order 1001 is shipped."
        await client.close()
        return median(times)

    return asyncio.run(go())


def _durable(url: str, db: str) -> float:
    async def go() -> float:
        client = model_client(url)
        desk = durable_desk(client, "http://127.0.0.1:9")  # a lookup pays nothing
        engine = uw.Engine(uw.connect(db), flows=[desk.flow])
        runner = uw.Runner(engine)
        times = []
        for _ in range(RUNS):
            began = time.perf_counter()
            run_id, _ = engine.start(desk.flow, {"input": QUESTION})
            state = await runner.run_until_complete(run_id)
            times.append(time.perf_counter() - began)
            assert state.result == "Order 1001 is shipped."
        await client.close()
        engine.store.close()
        return median(times)

    return asyncio.run(go())


def _figures(db: str, url_of: Callable[[], str]) -> list[Figure]:
    agents.set_tracing_disabled(True)
    with ModelServer() as model:
        bare = _bare(model.url) * 1e3
        durable = _durable(model.url, url_of()) * 1e3
    ratio = durable / bare
    target = TARGETS[db]
    return [Figure(f"{db}.openai_agents_run", durable, "ms", bare, ratio, f"<= {target}",
                   ratio <= target,
                   note=f"median of {RUNS}: 2 model calls + 1 tool call; baseline: the "
                        "same agent with Runner.run, bare")]


def bench_sqlite() -> list[Figure]:
    """A durable Agents SDK run against the bare one, on SQLite."""
    with sqlite_dir() as d:
        return _figures("sqlite", lambda: f"sqlite:///{d}/agents.db")


def bench_postgres() -> list[Figure]:
    """A durable Agents SDK run against the bare one, on PostgreSQL."""
    if pg_store_missing():
        return []
    with pg_schema() as (_, url):
        return _figures("postgres", lambda: url)
