"""A worker process of the support monitor.

    python examples/support/worker.py --db URL --desk URL [--environment prod]
        [--reply-timeout SECONDS] [--concurrency N] [--lease-ttl SECONDS]

It is ``underway worker`` with the monitor's engine: the same :class:`underway.worker.Worker`
leasing ready runs (and firing the sweep's schedule), but on an engine built in the
``prod`` environment that the policy's rules match on. It prints ``support worker OWNER
ready`` once it serves, and stops gracefully on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.app import Settings, build
from underway import connect
from underway.worker import Worker


async def serve(worker: Worker) -> None:
    """Serve until SIGTERM or SIGINT, announcing readiness on stdout."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    serving = asyncio.create_task(worker.run())
    await worker.ready.wait()
    print(f"support worker {worker.owner} ready", flush=True)
    await serving


def main(argv: list[str] | None = None) -> int:
    """Entry point of a worker process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True, help="the journal's database URL")
    p.add_argument("--desk", required=True, help="the ticket desk's base URL")
    p.add_argument("--environment", default="prod")
    p.add_argument("--reply-timeout", type=float, default=2 * 86400.0,
                   help="seconds a ticket waits for missing details from the customer")
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--lease-ttl", type=float, default=30.0)
    p.add_argument("--poll", type=float, default=0.2)
    a = p.parse_args(argv)
    store = connect(a.db)
    try:
        settings = Settings(desk=a.desk, environment=a.environment,
                            reply_timeout_s=a.reply_timeout, lease_ttl=a.lease_ttl)
        monitor = build(settings, store)
        worker = Worker(monitor.engine(store), concurrency=a.concurrency, poll=a.poll,
                        grace=10.0)
        asyncio.run(serve(worker))
        print(f"support worker {worker.owner} stopped: {worker.activations} activations",
              flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
