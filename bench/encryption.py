"""Encryption at rest: what sealing every payload costs a durable step and a resume.

Two stores on one database (the same SQLite file, the same PostgreSQL schema): one plain, one
with encryption on (``underway.crypto.encrypt`` with a keyring file). The same flow runs on
each, in a tenant of its own, repetitions interleaved so that the machine's load hits both
alike:

* a step: an activation of a flow whose step calls a read-only tool answering a customer
  record (~600 bytes), adds a note to its state and goes to itself — one commit per step,
  every event's data sealed (AES-256-GCM), the checkpoint every 100 events too;
* a resume: a fresh store (its caches empty: the tenant's data key is read and unwrapped
  again, as after a crash) loads a run of 1,000 such events from its checkpoint and tail.

The ratio is encrypted over plain; the target ≤ 1.15.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir
from underway.crypto import KeyringFile, encrypt
from underway.store import Store, connect

TARGET = 1.15
STEPS = 1000
"""Steps per activation timed (SQLite); PostgreSQL runs half as many."""
RESUME_EVENTS = 1000


class Notes(BaseModel):
    """What the loop's steps add up."""

    i: int = 0
    last: dict[str, Any] = {}


class Input(BaseModel):
    """How many steps to run."""

    n: int


@uw.tool(read_only=True)
async def customer(args: dict[str, Any]) -> dict[str, Any]:
    """A customer record, as a CRM would answer."""
    return {"id": args["id"], "name": "Ananya Rao", "phone": "+91 98765 43210",
            "pan": "ABCPE1234F", "address": "12 MG Road, Bengaluru 560001",
            "invoices": [{"number": f"INV-{i}", "amount": 1200 + i, "due": "2026-12-01"}
                         for i in range(8)]}


loop = uw.Flow("enc_loop", state=Notes, input=Input, tools=[customer])


@loop.step(start=True)
async def tick(ctx: uw.RunContext[Notes, Input]) -> Any:
    ctx.state.last = await ctx.call(customer, {"id": f"C-{ctx.state.i % 50}"})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)


def step_seconds(store: Store, tenant: str, n: int) -> float:
    """Seconds per step of one activation of ``n`` steps (claim excluded)."""
    engine = uw.Engine(store, flows=[loop])
    run_id, _ = engine.start(loop, {"n": n}, tenant_id=tenant)
    [lease] = engine.claim(tenant_id=tenant, run_id=run_id)
    began = time.perf_counter()
    state = asyncio.run(engine.activate(lease))
    elapsed = time.perf_counter() - began
    if state.status != "completed":
        raise RuntimeError(f"benchmark run ended {state.status}")
    return elapsed / n


def resume_seconds(url: str, keyring: str | None, tenant: str, run_id: str) -> float:
    """Seconds a fresh store takes to load the run (checkpoint + tail), key included."""
    store = connect(url, migrate=False)
    try:
        began = time.perf_counter()
        if keyring is not None:
            encrypt(store, KeyringFile(keyring))
        state = uw.Client(store).state(run_id, tenant_id=tenant)
        elapsed = time.perf_counter() - began
    finally:
        store.close()
    if state.seq < RESUME_EVENTS:
        raise RuntimeError(f"resumed run has {state.seq} events")
    return elapsed


def _bench(db: str, url: str, keyring: str, *, steps: int, reps: int) -> list[Figure]:
    plain = connect(url)
    sealed = connect(url)
    encrypt(sealed, KeyringFile(keyring))
    try:
        for store, tenant in ((plain, "plain"), (sealed, "sealed")):
            step_seconds(store, tenant, steps // 4)  # warm-up (and the tenant's data key)
        plain_steps, sealed_steps = [], []
        for _ in range(reps):
            plain_steps.append(step_seconds(plain, "plain", steps))
            sealed_steps.append(step_seconds(sealed, "sealed", steps))
        runs = {}
        for store, tenant in ((plain, "plain"), (sealed, "sealed")):
            engine = uw.Engine(store, flows=[loop])
            run_id, _ = engine.start(loop, {"n": RESUME_EVENTS // 3 + 1}, tenant_id=tenant)
            asyncio.run(uw.Runner(engine).run_until_idle())
            runs[tenant] = run_id
    finally:
        plain.close()
        sealed.close()
    plain_resume, sealed_resume = [], []
    for _ in range(reps * 5):
        plain_resume.append(resume_seconds(url, None, "plain", runs["plain"]))
        sealed_resume.append(resume_seconds(url, keyring, "sealed", runs["sealed"]))
    s, p = median(sealed_steps), median(plain_steps)
    rs, rp = median(sealed_resume), median(plain_resume)
    return [
        Figure(f"{db}.encryption_step", s * 1000, "ms/step", p * 1000, s / p,
               f"ratio <= {TARGET}", s / p <= TARGET,
               note="a durable step (read-only tool, ~600-byte result) with every payload "
               "sealed; baseline: the same step unencrypted, same database"),
        Figure(f"{db}.encryption_resume", rs * 1000, "ms", rp * 1000, rs / rp,
               f"ratio <= {TARGET}", rs / rp <= TARGET,
               note=f"a fresh store loads a {RESUME_EVENTS}-event run (checkpoint + tail), "
               "its data key read and unwrapped; baseline: the same unencrypted"),
    ]


def bench_sqlite(*, reps: int = 5) -> list[Figure]:
    """Encrypted against plain on one SQLite file."""
    with sqlite_dir() as d:
        keyring = os.path.join(d, "keyring.json")
        KeyringFile.create(keyring)
        return _bench("sqlite", f"sqlite:///{d}/underway.db", keyring, steps=STEPS, reps=reps)


def bench_postgres(*, reps: int = 5) -> list[Figure]:
    """Encrypted against plain in one PostgreSQL schema."""
    if pg_store_missing():
        return []
    with sqlite_dir() as d, pg_schema() as (_, url):
        keyring = os.path.join(d, "keyring.json")
        KeyringFile.create(keyring)
        return _bench("postgres", url, keyring, steps=STEPS // 2, reps=reps)
