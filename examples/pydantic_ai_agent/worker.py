"""A worker process: drives the ``refunds`` runs in the database until each has ended.

    python examples/pydantic_ai_agent/worker.py --db URL --shop URL
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai_agent.durable import durable_refunds
from underway import Engine, Runner, connect

ENDED = ("completed", "failed", "cancelled", "escalated", "dead_lettered")


async def drive(engine: Engine) -> None:
    """Advance every run until none is left to run."""
    runner = Runner(engine, poll=0.05, concurrency=4)
    while True:
        await runner.run_until_idle()
        rows = engine.store.list_runs("default", flow="refunds")
        if rows and all(r.status in ENDED for r in rows):
            return
        await asyncio.sleep(runner.poll)


def main(argv: list[str] | None = None) -> int:
    """Entry point of a worker process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True)
    p.add_argument("--shop", required=True)
    a = p.parse_args(argv)
    store = connect(a.db)
    engine = Engine(store, flows=[durable_refunds(a.shop).flow], lease_ttl=2.0)
    print("worker ready", flush=True)
    asyncio.run(drive(engine))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
