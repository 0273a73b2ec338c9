"""Child process for the Agents SDK crash test: start (once, by key) a run of a durable
Agents SDK agent and drive it until it is final.

    python tests/crash/openai_agents_worker.py --db URL --model URL --service URL

The agent's model is the SDK's ``OpenAIChatCompletionsModel`` against the local server of
:mod:`fakes.agent_wire`; its tool ``record`` posts a non-idempotent effect to the outside
service (:mod:`fakes.outside_service`) under the call's idempotency key, and reconciles an
unknown outcome by asking the service. ``UNDERWAY_CRASH_AFTER`` kills it at a fault point.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import agents
from agents import Agent, OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI
from worker import http_json

import underway as uw
from underway.integrations.openai_agents import DurableAgent, current_call

SERVICE = ""


@function_tool
async def record(run: str, step: int, part: int) -> str:
    """Record one part of a step of the run in the outside ledger."""
    key = current_call().key
    body = {"key": key, "kind": "record", "idempotent": False,
            "payload": {"run": run, "step": step, "part": part}}
    out = await asyncio.to_thread(http_json, "POST", f"{SERVICE}/effects", body)
    return str(out["id"])


async def was_recorded(key: str) -> uw.Reconciled:
    """Ask the ledger whether the effect with ``key`` took place."""
    found = await asyncio.to_thread(http_json, "GET", f"{SERVICE}/effects/{key}")
    if found.get("seen"):
        return uw.Reconciled.happened(str(found["result"]["id"]))
    return uw.Reconciled.not_happened()


def main() -> None:
    global SERVICE
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--runs", type=int, default=1)
    a = p.parse_args()
    SERVICE = a.service
    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=a.model, api_key="unused", max_retries=0)
    agent = Agent("recorder", instructions="Record every step.", tools=[record],
                  model=OpenAIChatCompletionsModel("gpt-4o-mini", client))
    durable = DurableAgent(agent, tools={"record": {"reconcile": was_recorded,
                                                    "trusted_output": True}})
    engine = uw.Engine(uw.connect(a.db), flows=[durable.flow], lease_ttl=1.0)
    ids = [engine.start(durable.flow, {"input": f"run-{i}"}, idempotency_key=f"run-{i}")[0]
           for i in range(a.runs)]

    async def drive() -> None:
        for run_id in ids:
            await uw.Runner(engine, poll=0.05).run_until_complete(run_id)

    asyncio.run(drive())
    print(json.dumps({"runs": ids, "results": [engine.state(r).result for r in ids]}))


if __name__ == "__main__":
    main()
