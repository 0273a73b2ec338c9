"""A worker process: drives the given runs until each has finished or waits for a person.

    python examples/openai_agents_agent/worker.py --db URL --model URL --payments URL RUN...
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agents

import underway as uw
from openai_agents_agent.agent import durable_desk, model_client


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--payments", required=True)
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    # The journal is the record of every call; the SDK's traces would leave the machine.
    agents.set_tracing_disabled(True)
    desk = durable_desk(model_client(a.model), a.payments)
    # A short lease: the next worker takes a killed worker's run over within a second.
    engine = uw.Engine(uw.connect(a.db), flows=[desk.flow], lease_ttl=1.0)

    async def drive() -> None:
        runner = uw.Runner(engine, poll=0.05)
        for run_id in a.runs:
            await runner.run_until_complete(run_id)

    asyncio.run(drive())


if __name__ == "__main__":
    main()
