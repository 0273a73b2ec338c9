"""Child process of the pydantic-ai crash test: durable pydantic-ai agents, driven to an end.

    python tests/crash/pydantic_ai_worker.py --db URL --model URL --service URL --tenant T
                                             --runs N

Run ``i`` refunds order ``order-i``. Its agent is an unmodified pydantic-ai ``Agent`` whose
model is pydantic-ai's ``OpenAIChatModel``, talking to the local server at ``--model`` (which
counts the requests). It looks the order up (read-only) and sends the refund to the outside
service (mutating, not idempotent, reconciled with the service by its key; with
``--no-reconcile`` it has no hook, and a hidden outcome escalates). Runs are
started with idempotency keys, so a restarted child finds its predecessor's runs.

The child exits when every run is final or escalated, printing one JSON line of statuses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from worker import http_json

from underway import Engine, Reconciled, Runner, connect
from underway.integrations.pydantic_ai import DurableAgent, call_info

TIMEOUT_S = 60.0


def order(i: int) -> str:
    """The order run ``i`` refunds."""
    return f"order-{i}"


def build(model_url: str, service: str, *, reconcile: bool = True
          ) -> tuple[DurableAgent, AsyncOpenAI]:
    """The durable refunds agent, its model at ``model_url``, its effects at ``service``;
    without ``reconcile``, a refund whose outcome a kill hid escalates to an operator."""
    client = AsyncOpenAI(base_url=f"{model_url}/v1", api_key="sk-test", max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, instructions="Refund the order the user names.")

    @agent.tool_plain
    def order_status(order: str) -> str:
        """Look an order up."""
        return f"{order} is paid and eligible for a refund"

    @agent.tool_plain
    def send_refund(order: str, cents: int) -> str:
        """Send a refund."""
        sent = http_json("POST", f"{service}/effects", {
            "key": call_info().key, "kind": "refund", "idempotent": False,
            "payload": {"order": order, "cents": cents}})
        return f"refund {sent['id']} sent"

    async def was_sent(key: str) -> Reconciled:
        seen = await asyncio.to_thread(http_json, "GET", f"{service}/effects/{key}")
        if not seen["seen"]:
            return Reconciled.not_happened()
        return Reconciled.happened(f"refund {seen['result']['id']} sent")

    durable = DurableAgent(agent, name="refunds", tools={
        "order_status": {"mutating": False, "trusted_output": True},
        "send_refund": {"reconcile": was_sent if reconcile else None, "timeout": TIMEOUT_S},
    })
    return durable, client


async def drive(engine: Engine, durable: DurableAgent, client: AsyncOpenAI, tenant: str,
                runs: int) -> dict[str, str]:
    """Start the batch (idempotently) and advance it until every run is final or escalated."""
    ids = []
    for i in range(runs):
        run_id, _ = engine.start(durable.flow, {"prompt": f"Please refund {order(i)} of {tenant}."},
                                 tenant_id=tenant, idempotency_key=f"{tenant}-{i}")
        ids.append(run_id)
    runner = Runner(engine, poll=0.05, concurrency=runs)
    final = ("completed", "failed", "cancelled", "escalated", "dead_lettered")
    while True:
        await runner.run_until_idle()
        statuses = {}
        for run_id in ids:
            row = engine.store.get_run(tenant, run_id)
            assert row is not None
            statuses[run_id] = row.status
        if all(s in final for s in statuses.values()):
            await client.close()
            return statuses
        await asyncio.sleep(runner.poll)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--no-reconcile", action="store_true")
    a = p.parse_args(argv)
    durable, client = build(a.model, a.service, reconcile=not a.no_reconcile)
    store = connect(a.db)
    engine = Engine(store, flows=[durable.flow], lease_ttl=2.0)
    statuses = asyncio.run(drive(engine, durable, client, a.tenant, a.runs))
    store.close()
    print(json.dumps({"statuses": statuses}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
