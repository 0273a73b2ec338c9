"""``underway deploy check`` over a database of 10,000 parked runs.

``RUNS`` runs of one flow are parked as workers leave them: nine in ten between steps,
waiting for a signal, and one in ten mid-step, waiting for a signed approval of its second
call — a run whose step the check runs again against its journal. Their journals are the
engine's own: a template run of each kind is driven by a real engine (on an in-memory
store) and its events re-encoded for every run id, each journal written through
``Journal.encode_checkpointed`` and ``store.append`` under a held lease, with the
checkpoint of its last event, as a worker handing the run back writes it.

The figure is the whole check (listing the unfinished runs, reading their states, checking
flow, step, input and state, re-running the steps of the runs parked mid-step); the
baseline is reading each run's state alone (``Journal.load`` run by run: a checkpoint read
and a tail read per run), what the check would cost in reads without batches. The check
reads checkpoints and their tails ``BATCH`` runs a query (``JournalStore.load_checkpoints``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway import events as ev
from underway.events import genesis_hash
from underway.guard.policy import policy_from_dict
from underway.journal import Journal
from underway.journal.state import Recorded, RunState, apply
from underway.ops.deploy import BATCH, check_deploy
from underway.store import Lease, NewRun, RunUpdate, Store, connect
from underway.store.base import AppendBatch
from underway.testing import memory_engine

RUNS = int(os.environ.get("BENCH_DEPLOY_RUNS", "10000"))
MID_STEP_EVERY = 10
"""One run in this many is parked mid-step (waiting for an approval)."""
TARGET_S = 60.0
T0 = 1_717_200_000.0

HOLD = policy_from_dict({"version": "bench", "rules": [
    {"id": "payments-need-finance", "tools": ["pay"], "outcome": "require_approval",
     "approver_role": "finance"}]})


class Order(BaseModel):
    order: str
    pay: bool = False


class Box(BaseModel):
    customer: dict[str, Any] = {}
    notes: list[str] = []


@uw.tool(mutating=False)
async def lookup(args: Any) -> dict[str, Any]:
    return {"customer": f"c-{args['order']}", "open": 3, "tier": "gold"}


@uw.tool
async def pay(args: Any) -> dict[str, Any]:
    return {"paid": args["amount"]}


flow = uw.Flow("parked", state=Box, input=Order, policy=HOLD, tools=[lookup, pay])


@flow.step(start=True)
async def intake(ctx: uw.RunContext[Box, Order]) -> Any:
    ctx.state.customer = await ctx.call(lookup, {"order": ctx.input.order})
    ctx.state.notes.append("looked up")
    if ctx.input.pay:
        return ctx.goto(settle)
    return ctx.wait("reply", then=close)


@flow.step
async def settle(ctx: uw.RunContext[Box, Order]) -> Any:
    await ctx.call(lookup, {"order": ctx.input.order})
    await ctx.call(pay, {"amount": 120, "order": ctx.input.order})
    return ctx.goto(close)


@flow.step
async def close(ctx: uw.RunContext[Box, Order]) -> Any:
    return ctx.done()


def _templates() -> dict[bool, list[Recorded]]:
    """A parked run of each kind, journaled by the engine: its decoded events."""
    engine, _ = memory_engine([flow], start=T0)
    out = {}
    for paying in (False, True):
        run_id = f"template-{int(paying)}"
        engine.start(flow, {"order": "o-17", "pay": paying}, run_id=run_id)
        asyncio.run(uw.Runner(engine).run_until_idle())
        state = engine.state(run_id)
        assert state.status == "waiting", state
        out[paying] = engine.journal.history("default", run_id)
    return out


def _rekeyed(records: list[Recorded], old: str, new: str) -> list[Recorded]:
    """The template's events with its run id (in keys and request ids) replaced."""
    out = []
    for r in records:
        data = json.loads(json.dumps(r.event.model_dump(mode="json")).replace(old, new))
        out.append(Recorded(r.seq, r.at, ev.from_envelope(
            {"type": data.pop("type"), "v": r.event.VERSION, "data": data, "seq": r.seq,
             "at": r.at})))
    return out


def _fill(store: Store, *, writers: int = 1) -> None:
    """Write the ``RUNS`` parked journals, ``writers`` threads at a time."""
    journal = Journal(store)
    templates = _templates()

    def write(i: int) -> None:
        paying = i % MID_STEP_EVERY == 0
        run_id = f"r{i:06d}"
        records = _rekeyed(templates[paying], f"template-{int(paying)}", run_id)
        state = RunState(tenant_id="default", run_id=run_id)
        for rec in records:
            apply(state, rec)
        blobs: dict[str, bytes] = {}
        stored, checkpoint = journal.encode_checkpointed(
            state, [(r.seq, r.at, r.event) for r in records],
            genesis_hash("default", run_id), blobs)
        store.create_run(NewRun(
            tenant_id="default", run_id=run_id, flow=flow.name, idempotency_key=None,
            first_event=stored[0], blobs=blobs, step=str(records[0].event.first_step),
            now=T0, next_wake_at=T0 + 86_400 * 365))
        lease: Lease = store.claim(owner="bench", now=T0 + 86_400 * 365, ttl=60,
                                   run_id=run_id, tenant_id="default")[0]
        store.append(AppendBatch(
            tenant_id="default", run_id=run_id, expected_seq=1, fence=lease.token,
            events=stored[1:], now=T0, checkpoint=checkpoint, release=True,
            update=RunUpdate("waiting", state.step, state.wake_at, state.waiting_signal)))

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(RUNS)))


def _figures(store: Store, db: str, *, reps: int = 3) -> list[Figure]:
    ids = [f"r{i:06d}" for i in range(RUNS)]
    naive_s, check_s, batched_s = [], [], []
    for _ in range(reps):
        # A fresh journal for each measurement: no blob read before it is cached.
        journal = Journal(store)
        began = time.perf_counter()
        for run_id in ids:
            journal.load("default", run_id)
        naive_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        report = asyncio.run(check_deploy(store, [flow]))
        check_s.append(time.perf_counter() - began)
        assert report.ok and report.checked == RUNS, report.broken[:1]
        assert report.rerun == RUNS // MID_STEP_EVERY
        journal = Journal(store)
        began = time.perf_counter()
        for i in range(0, RUNS, BATCH):
            journal.load_many("default", ids[i:i + BATCH])
        batched_s.append(time.perf_counter() - began)
    base, value, batched = median(naive_s), median(check_s), median(batched_s)
    mid = RUNS // MID_STEP_EVERY
    return [
        Figure(f"{db}.deploy_check_10k_parked", value, "s", base, value / base,
               f"< {TARGET_S:g} s", value < TARGET_S,
               note=f"{RUNS:,} parked runs ({mid:,} mid-step, their steps run again); "
                    "baseline: each state loaded alone"),
        Figure(f"{db}.deploy_check_states_10k", batched, "s", base, batched / base, "< 1",
               batched < base, note=f"Journal.load_many, {BATCH} runs a batch, against "
                                    "Journal.load run by run"),
    ]


def bench_sqlite() -> list[Figure]:
    """The check on SQLite."""
    with sqlite_dir() as d:
        url = f"sqlite:///{d}/parked.db"
        filling = connect(url)
        # Setup only: 30,000 small commits need not each wait for the disk. The check
        # reads from a store opened afresh, durable as ever.
        filling._conn.execute("PRAGMA synchronous=OFF")  # type: ignore[attr-defined]
        try:
            _fill(filling)
        finally:
            filling.close()
        store = connect(url)
        try:
            return _figures(store, "sqlite")
        finally:
            store.close()


def bench_postgres() -> list[Figure]:
    """The check on PostgreSQL."""
    with pg_schema() as (schema, url):
        # Setup only (see bench_sqlite): the filling connections commit asynchronously.
        os.environ["PGOPTIONS"] = "-c synchronous_commit=off"
        try:
            filling = connect(url)
        finally:
            del os.environ["PGOPTIONS"]
        try:
            _fill(filling, writers=4)
        finally:
            filling.close()
        _analyze(url, schema)
        store = connect(url)
        try:
            return _figures(store, "postgres")
        finally:
            store.close()


def _analyze(url: str, schema: str) -> None:
    """Gather the planner's statistics, as autovacuum does soon after a bulk insert."""
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        for table in ("runs", "events", "checkpoints"):
            conn.execute(f'ANALYZE "{schema}".{table}')
