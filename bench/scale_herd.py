"""The model's herd, observed: real ``Worker``s on the local PostgreSQL, their claims counted
and set against what ``bench/scale_model.py`` predicts for the same fleet and load.

The model's largest term is the herd: a run made due wakes every idle worker listening,
and each claims. Here ``WORKERS`` workers (one engine, store and LISTEN connection each,
``--concurrency 2``, ``--poll 1``) serve one database while runs come due at ``RATE`` a
second (each run's one step ends it at once): started then, each with its NOTIFY; or
started beforehand with a ``start_at`` each, so that only their due times wake the
workers (they sleep until the earliest). Counted: every ``claim`` the
workers make, and the runs they lease. The ratio is claims counted over claims predicted
for the same workers, rate and measured costs; 1 means the model's wake-up rule is the
workers' own. Rates are over the wall time of the window, so a loaded machine that makes
the workers coalesce wake-ups shows as a ratio below 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pydantic

import scale_model
import underway as uw
from common import pg_base_url
from scale_model import Measured, Workload
from underway.store import connect
from underway.worker import Worker

WORKERS = 6
RATE = 10.0
SECONDS = 6.0
TENANT = "herd"


class Nothing(pydantic.BaseModel):
    """No state, no input."""


def _flow() -> uw.Flow[Any, Any]:
    flow: uw.Flow[Nothing, Nothing] = uw.Flow("herd", state=Nothing, input=Nothing)

    @flow.step
    async def finish(ctx: uw.RunContext[Nothing, Nothing]) -> Any:
        return ctx.done(None)

    return flow


class Counted:
    """A store whose ``claim`` calls (and the leases they return) are counted."""

    def __init__(self, inner: Any, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def claim(self, **kwargs: Any) -> Any:
        """Claim on the wrapped store, counted."""
        leases = self._inner.claim(**kwargs)
        self._counts["claims"] += 1
        self._counts["leased"] += len(leases)
        return leases

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def observe(url: str, *, workers: int = WORKERS, rate: float = RATE,
                  seconds: float = SECONDS, timers: bool = False) -> dict[str, float]:
    """Claims and leases per second of ``workers`` real workers while runs come due at
    ``rate`` a second for ``seconds``: started then (each NOTIFYs), or, with ``timers``,
    started beforehand with a ``start_at`` each, so only their due times wake the
    workers."""
    flow = _flow()
    counts: Counter[str] = Counter()
    stores = [connect(url) for _ in range(workers)]
    client = connect(url)
    client.migrate()
    fleet = [Worker(uw.Engine(Counted(s, counts), flows=[flow]), concurrency=2, poll=1.0,
                    eager=False) for s in stores]
    serving = [asyncio.create_task(w.run()) for w in fleet]
    n = int(rate * seconds)
    try:
        await asyncio.wait_for(asyncio.gather(*(w.ready.wait() for w in fleet)), 60)
        starter = uw.Engine(client, flows=[flow])
        if timers:
            first = time.time() + 2.0
            for i in range(n):
                starter.start(flow, {}, tenant_id=TENANT, eager=False,
                              start_at=first + i / rate)
            await asyncio.sleep(max(0.0, first - time.time()))  # paced: the window opens
        counts.clear()
        began = time.perf_counter()
        for i in range(n):  # paced load, not a wait for a condition
            if not timers:
                starter.start(flow, {}, tenant_id=TENANT, eager=False)
            await asyncio.sleep(max(0.0, began + (i + 1) / rate - time.perf_counter()))
        elapsed = time.perf_counter() - began
        got = dict(counts)
        deadline = time.monotonic() + 60
        while counts["leased"] < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # every run taken: the fleet kept up
        if counts["leased"] < n:
            raise RuntimeError(f"{counts['leased']} of {n} runs were claimed")
    finally:
        for w in fleet:
            w.stop(now=True)
        await asyncio.gather(*serving, return_exceptions=True)
        for s in [*stores, client]:
            s.close()
    return {"claims_per_s": got.get("claims", 0) / elapsed,
            "leased_per_s": got.get("leased", 0) / elapsed, "seconds": elapsed}


def predicted(m: Measured, *, workers: int = WORKERS, rate: float = RATE,
              timers: bool = False) -> float:
    """Claims per second the model predicts for this fleet: ``rate`` runs a second, all
    announced by NOTIFY (or all by their timers), slots nearly always free, no schedules,
    one tenant."""
    step_s = 0.005
    w = Workload(workers=workers, tenants=1, slots=2, step_s=step_s,
                 utilisation=rate * step_s / (workers * 2),
                 notified_share=0.0 if timers else 1.0, poll_s=1.0,
                 rtt_s=0.0001, schedules_every_s=None)
    return scale_model.load(m, w, shards=1).claims


@contextlib.contextmanager
def own_database() -> Iterator[str]:
    """A fresh database on the benchmark server, dropped afterwards: NOTIFY channels are
    the database's, so in a shared one every run started in any schema would wake these
    workers too."""
    base = pg_base_url()
    name = f"scale_herd_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(base)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def check(m: Measured, *, timers: bool = False) -> tuple[dict[str, float], float]:
    """The observation, in a database of its own, and the model's prediction."""
    with own_database() as url:
        return asyncio.run(observe(url, timers=timers)), predicted(m, timers=timers)
