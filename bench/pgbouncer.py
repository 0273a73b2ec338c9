"""PostgreSQL through PgBouncer in transaction mode (``pooler=transaction``).

A real PgBouncer (the test suite's throwaway one: ``tests/fakes/pgbouncer.py``) stands in
front of the benchmark server. Two sets of figures, each a ratio against a baseline
measured in the same run:

* **wake latency**: an idle worker, a run waiting for a signal; milliseconds from the
  signal sent to the next step's start (journaled). Baseline: straight to the server,
  LISTEN. Against it: through PgBouncer with ``listen_url`` (LISTEN on the server), and
  through PgBouncer without it (the worker polls; ``poll`` = 1 s, the default, and 0.25 s).
  The signals come at random moments of the worker's idle wait, so polling is caught at
  every phase: its median is about half of ``poll`` and its worst is ``poll``.
* **the mode's cost**: a start, a read and a signal, one after another (one round trip
  each). Straight to the server without the mode (baseline), straight to it with
  ``pooler=transaction`` (the schema set at the start of each transaction, pipelined:
  what the mode itself costs), and through PgBouncer (the mode and the hop). Wall time
  per operation and the client's CPU time per operation.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_base_url, pg_schema, pg_store_missing
from underway import events as ev
from underway.client import Client
from underway.store import connect

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from fakes.pgbouncer import throwaway_pgbouncer

TENANT = "default"
WAKES = 8
"""Signals per way of waking."""
OPS = 200
"""Operations per way of reaching the server, per repetition."""
REPS = 3
PATIENCE_S = 60.0


class Nothing(BaseModel):
    """No state."""


waiter: uw.Flow[Nothing, Any] = uw.Flow("waiter", state=Nothing)


@waiter.step
async def wait(ctx: uw.RunContext[Nothing, Any]) -> uw.flow.Next:
    return ctx.wait("go", then=woke)


@waiter.step
async def woke(ctx: uw.RunContext[Nothing, Any]) -> uw.flow.Next:
    return ctx.done(None)


@contextmanager
def serving(url: str, poll: float) -> Iterator[uw.Worker]:
    """A worker on ``url`` in a thread of its own, idle until runs come."""
    store = connect(url)
    worker = uw.Worker(uw.Engine(store, flows=[waiter]), poll=poll, concurrency=4)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
    thread.start()
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not worker.ready.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError("the worker never became ready")
            time.sleep(0.01)
        yield worker
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join()
        loop.close()
        store.close()


def _until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {PATIENCE_S} s")
        time.sleep(0.005)


def wake_ms(url: str, poll: float, seed: int) -> list[float]:
    """Milliseconds from a signal to the step it wakes, :data:`WAKES` times."""
    rng = random.Random(seed)
    out = []
    with serving(url, poll) as worker:
        client = Client(url)
        try:
            for i in range(WAKES):
                rid = f"w{seed}-{i}"
                client.start("waiter", None, run_id=rid)
                _until(lambda r=rid: (row := client.store.get_run(TENANT, r)) is not None
                       and row.status == "waiting" and row.lease_owner is None, "wait")
                # A random moment of the idle worker's wait (it waits ``poll`` at most).
                time.sleep(2 * poll + rng.random() * poll)
                sent = time.time()
                client.signal(rid, "go")
                _until(lambda r=rid: client.store.get_run(TENANT, r).status == "completed",
                       "completion")
                started = next(rec.at for rec in client.history(rid)
                               if isinstance(rec.event, ev.StepStarted)
                               and rec.event.step == "woke")
                out.append((started - sent) * 1000)
        finally:
            client.close()
    assert worker.activations >= WAKES
    return out


def cost(url: str, tag: str) -> tuple[float, float]:
    """Wall and client CPU milliseconds per operation (start, read, signal) on ``url``."""
    store = connect(url)
    client = Client(store)
    walls, cpus = [], []
    try:
        for rep in range(REPS):
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(OPS // 3):
                rid = f"{tag}{rep}-{i}"
                client.start("waiter", None, run_id=rid)
                store.get_run(TENANT, rid)
                client.signal(rid, "go")
            ops = 3 * (OPS // 3)
            walls.append((time.perf_counter() - wall) * 1000 / ops)
            cpus.append((time.process_time() - cpu) * 1000 / ops)
    finally:
        store.close()
    return median(walls), median(cpus)


def bench_postgres() -> list[Figure]:
    """The figures (see the module)."""
    if pg_store_missing():
        return []
    figures: list[Figure] = []
    with throwaway_pgbouncer(pg_base_url()) as bouncer, pg_schema() as (_, direct):
        connect(direct).close()  # migrated once, by the direct store
        pooled, listening = bouncer.route(direct), bouncer.route(direct, listen=True)
        base = wake_ms(direct, 1.0, 1)
        b_med, b_max = median(base), max(base)
        figures.append(Figure("pgbouncer.wake_direct_listen_ms", b_med, "ms",
                              note=f"worst {b_max:.1f} ms"))
        for name, url, poll, seed in (("listen_url", listening, 1.0, 2),
                                      ("poll_1s", pooled, 1.0, 3),
                                      ("poll_250ms", pooled, 0.25, 4)):
            got = wake_ms(url, poll, seed)
            med = median(got)
            figures.append(Figure(
                f"pgbouncer.wake_{name}_ms", med, "ms", baseline=b_med, ratio=med / b_med,
                target=f"worst <= {poll * 1000:.0f} ms + a query" if "poll" in name
                else "~1x", ok=(max(got) <= poll * 1000 + 250) if "poll" in name else None,
                note=f"worst {max(got):.1f} ms over {len(got)} signals"))
        wall0, cpu0 = cost(direct, "base")
        sep = "&" if "?" in direct else "?"
        for name, url in (("mode_direct", f"{direct}{sep}pooler=transaction"),
                          ("through_pgbouncer", pooled)):
            wall, cpu = cost(url, name)
            # Wall time on a shared machine swings by 2x between repetitions: the client's
            # CPU time is the figure with a target.
            figures.append(Figure(f"pgbouncer.op_{name}_ms", wall, "ms", baseline=wall0,
                                  ratio=wall / wall0))
            alone = name == "mode_direct"
            figures.append(Figure(f"pgbouncer.op_{name}_cpu_ms", cpu, "ms", baseline=cpu0,
                                  ratio=cpu / cpu0, target="<= 1.5x" if alone else "",
                                  ok=(cpu / cpu0 <= 1.5) if alone else None))
    return figures
