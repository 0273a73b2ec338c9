"""A pydantic-ai agent made durable, end to end: ``python examples/pydantic_ai_agent/run.py``.

Starts the shop, four refund requests as underway runs, and a worker process. The worker
is killed with SIGKILL while the shop is paying a refund it asked for. A second worker
finishes the runs: the refund in flight is reconciled with the shop, not paid again, and
no model request that was answered is asked again. Prints each run's story; exits 1 if an
invariant failed. SQLite in a fresh temporary directory, or the database given with
``--db``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai_agent.durable import durable_refunds
from pydantic_ai_agent.shop import ORDERS, Shop, ShopServer
from underway import Engine, connect
from underway import events as ev

WORKER = Path(__file__).with_name("worker.py")


def say(text: str = "") -> None:
    """Print at once."""
    print(text, flush=True)


def worker(db: str, shop: str) -> subprocess.Popen[str]:
    """Start a worker process."""
    return subprocess.Popen([sys.executable, str(WORKER), "--db", db, "--shop", shop],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    """Run the demonstration; 0 when every invariant held."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--data", type=Path, help="directory for the shop's records and the "
                   "journal (default: a new temporary directory)")
    p.add_argument("--db", help="journal database URL (default: SQLite in --data)")
    a = p.parse_args(argv)
    data = a.data or Path(tempfile.mkdtemp(prefix="underway-pydantic-ai-"))
    data.mkdir(parents=True, exist_ok=True)
    db = a.db or f"sqlite:///{data / 'underway.db'}"
    shop = Shop(data / "shop.json")
    with ShopServer(shop) as server:
        durable = durable_refunds(server.url)
        engine = Engine(connect(db), flows=[durable.flow])
        say(f"[1] four refund requests, as runs of the durable agent, in {db}")
        runs = {}
        for order, o in ORDERS.items():
            run_id, _ = engine.start(durable.flow, {
                "prompt": f"{o['customer']} asks for a refund of order {order}."},
                idempotency_key=f"refund-{order}")
            runs[order] = run_id
            say(f"    {order} {o['customer']:<6} run {run_id}")

        say("[2] worker 1 starts; it is killed as the shop pays its first refund")
        first = worker(db, server.url)
        # Wait for the condition, not for time: the shop has been asked for a refund.
        while not shop.data["attempts"] and first.poll() is None:
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
        say(f"    worker 1 killed (SIGKILL, exit {first.returncode})")

        say("[3] worker 2 takes over once worker 1's leases expire")
        second = worker(db, server.url)
        _, err = second.communicate(timeout=120)
        if second.returncode != 0:
            say(err)
            return 1

        say("[4] what each run did")
        problems = []
        paid = Counter(r["order"] for r in shop.refunds().values())
        for order, run_id in runs.items():
            state = engine.client.state(run_id)
            events = [e.event for e in engine.client.events(run_id)]
            asked = sum(isinstance(e, ev.ModelResponded) for e in events)
            refunds = [e for e in events if isinstance(e, ev.ToolSucceeded)
                       and e.tool == "refund"]
            how = "reconciled with the shop" if any(e.reconciled for e in refunds) else "paid"
            say(f"    {order}: {state.status}, {asked} model responses, refund {how}: "
                f"{state.result}")
            if state.status != "completed" or paid[order] != 1 or len(refunds) != 1:
                problems.append(f"{order}: {state.status}, paid {paid[order]} times")
        attempts = shop.data["attempts"]
        say("[5] the shop: refunds per idempotency key")
        for key, n in attempts.items():
            say(f"    {key:<60} asked {n}x, paid once")
    if problems:
        say("FAILED: " + "; ".join(problems))
        return 1
    say(f"OK: {len(runs)} refunds, each paid once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
