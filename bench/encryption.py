"""Encryption at rest: what sealing every payload costs a durable step and a resume.

Two stores on one database (the same SQLite file, the same PostgreSQL schema): one plain, one
with encryption on (``underway.crypto.encrypt`` with a keyring file). The same flow runs on
each, in a tenant of its own, repetitions interleaved so that the machine's load hits both
alike:

* a step: an activation of a flow whose step calls a read-only tool answering a customer
  record (~600 bytes), adds a note to its state and goes to itself — one commit per step,
  every event's data sealed (AES-256-GCM), the checkpoint every 100 events too;
* a resume: a fresh journal (its blob cache empty, as a worker taking a run over has) of a
  worker's store loads a run of 1,000 such events that waits, handed back with its
  checkpoint (the checkpoint and the event after it are read and opened);
* a takeover: the same load of a run whose worker died 60 events after its last checkpoint
  (``resume.build_history``: 1,000 small events), so 60 events are opened and folded;
* the first resume in a new process (diagnostic): a fresh store, so the tenant's data key
  is read and unwrapped too, once per tenant per process.

The ratio is encrypted over plain — the median of the ratios of pairs measured back to back,
so that a burst of load on a shared machine hits one pair, not the figure; the target ≤ 1.15
for a step and a resume.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, pg_store_missing, sqlite_dir
from resume import TENANT as HISTORY_TENANT
from resume import build_history
from underway.crypto import KeyringFile, encrypt
from underway.store import Store, connect

TARGET = 1.15
STEPS = 200
"""Steps per activation timed (SQLite); PostgreSQL runs half as many."""
PAIRS = 30
"""Pairs of activations (plain, then encrypted) timed back to back."""
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


def resume_seconds(store: Store, tenant: str, run_id: str, *, tail: bool = False) -> float:
    """Seconds a fresh journal on ``store`` takes to load the run (checkpoint + tail)."""
    began = time.perf_counter()
    state = uw.Client(store).state(run_id, tenant_id=tenant)
    elapsed = time.perf_counter() - began
    if state.seq < RESUME_EVENTS - (2 if tail else 0):
        raise RuntimeError(f"resumed run has {state.seq} events")
    return elapsed


def first_resume_seconds(url: str, keyring: str | None, tenant: str, run_id: str) -> float:
    """Seconds a fresh store takes to load the run, its data key read and unwrapped."""
    store = connect(url, migrate=False)
    try:
        began = time.perf_counter()
        if keyring is not None:
            encrypt(store, KeyringFile(keyring))
        uw.Client(store).state(run_id, tenant_id=tenant)
        return time.perf_counter() - began
    finally:
        store.close()


def _paired(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(median encrypted, median plain, median of the pairs' ratios)."""
    return (median([s for _, s in pairs]), median([p for p, _ in pairs]),
            median([s / p for p, s in pairs]))


def _bench(db: str, url: str, keyring: str, *, steps: int, reps: int) -> list[Figure]:
    plain = connect(url)
    sealed = connect(url)
    encrypt(sealed, KeyringFile(keyring))
    try:
        for store, tenant in ((plain, "plain"), (sealed, "sealed")):
            step_seconds(store, tenant, steps // 4)  # warm-up (and the tenant's data key)
        step_pairs = [(step_seconds(plain, "plain", steps), step_seconds(sealed, "sealed", steps))
                      for _ in range(reps)]
        runs = {}
        for store, tenant in ((plain, "plain"), (sealed, "sealed")):
            engine = uw.Engine(store, flows=[loop])
            run_id, _ = engine.start(loop, {"n": RESUME_EVENTS // 3 + 1}, tenant_id=tenant)
            asyncio.run(uw.Runner(engine).run_until_idle())
            runs[tenant] = run_id
        resume_pairs = [(resume_seconds(plain, "plain", runs["plain"]),
                         resume_seconds(sealed, "sealed", runs["sealed"]))
                        for _ in range(reps * 10)]
        crashed = {"plain": build_history(plain, RESUME_EVENTS),
                   "sealed": build_history(sealed, RESUME_EVENTS)}
        takeover_pairs = [
            (resume_seconds(plain, HISTORY_TENANT, crashed["plain"], tail=True),
             resume_seconds(sealed, HISTORY_TENANT, crashed["sealed"], tail=True))
            for _ in range(reps * 5)]
    finally:
        plain.close()
        sealed.close()
    first_pairs = [(first_resume_seconds(url, None, "plain", runs["plain"]),
                    first_resume_seconds(url, keyring, "sealed", runs["sealed"]))
                   for _ in range(reps)]
    s, p, r = _paired(step_pairs)
    rs, rp, rr = _paired(resume_pairs)
    ts, tp, tr = _paired(takeover_pairs)
    fs, fp, fr = _paired(first_pairs)
    return [
        Figure(f"{db}.encryption_step", s * 1000, "ms/step", p * 1000, r,
               f"ratio <= {TARGET}", r <= TARGET,
               note="a durable step (read-only tool, ~600-byte result) with every payload "
               "sealed; baseline: the same step unencrypted, same database"),
        Figure(f"{db}.encryption_resume", rs * 1000, "ms", rp * 1000, rr,
               f"ratio <= {TARGET}", rr <= TARGET,
               note=f"a fresh journal of a worker's store loads a {RESUME_EVENTS}-event run "
               "(checkpoint + tail), every payload opened; baseline: the same unencrypted"),
        Figure(f"{db}.encryption_takeover", ts * 1000, "ms", tp * 1000, tr,
               note="the load of a run whose worker died 60 events after its checkpoint: "
               "60 sealed events opened and folded; baseline: the same unencrypted"),
        Figure(f"{db}.encryption_first_resume", fs * 1000, "ms", fp * 1000, fr,
               note="the same load in a new process (a fresh store): the keyring read and "
               "the tenant's data key read and unwrapped, once per tenant and process"),
    ]


def bench_sqlite(*, reps: int = PAIRS) -> list[Figure]:
    """Encrypted against plain on one SQLite file."""
    with sqlite_dir() as d:
        keyring = os.path.join(d, "keyring.json")
        KeyringFile.create(keyring)
        return _bench("sqlite", f"sqlite:///{d}/underway.db", keyring, steps=STEPS, reps=reps)


def bench_postgres(*, reps: int = PAIRS) -> list[Figure]:
    """Encrypted against plain in one PostgreSQL schema."""
    if pg_store_missing():
        return []
    with sqlite_dir() as d, pg_schema() as (_, url):
        keyring = os.path.join(d, "keyring.json")
        KeyringFile.create(keyring)
        return _bench("postgres", url, keyring, steps=STEPS // 2, reps=reps)
