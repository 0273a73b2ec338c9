"""Long runs: what a run's next signal, step, checkpoint and inbox cost once it has lived
long, against the same on a young run, measured in the same run and interleaved.

Four shapes, each a ratio late / early (target <= 1.2):

* signals: a run that consumes one signal per wait (send, claim, activate). Early: its
  first ``WINDOW`` signals. Late: the last ``WINDOW`` of ``LONG``, once ``LONG - WINDOW``
  were consumed (``4 x LONG`` events in its journal);
* steps: a ``goto`` loop. Early: at about 1,000 events. Late: at ``LONG`` events;
* checkpoints: the same loop with a checkpoint on every step (write), and a fresh load of
  the run's state, checkpoint + tail (load);
* an inbox the run never reads: ``LONG`` signals it does not wait for. Sending one more
  (send), and consuming the signal it waits for (activation), against an empty inbox.

Long histories are built in bulk, as the engine writes them: events encoded by the journal
and appended under a held lease in batches, the consumed signals marked by those appends,
a checkpoint at the end; the signal rows are inserted in one statement. The journal and the
inbox then hold every row: the built journal is verified.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing, contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_base_url, pg_store_missing, sqlite_dir
from underway import events as ev
from underway.codec import signal_where
from underway.events import canonical_json
from underway.journal.state import Recorded, apply
from underway.store import connect
from underway.store.base import AppendBatch, RunUpdate

TENANT = "default"
LONG = int(os.environ.get("UNDERWAY_BENCH_LONG", "100000"))
"""Signals (and events, and unread signals) of the long runs."""
WINDOW = 1_000
"""Signals measured at each end."""
BLOCK = 50
"""Signals or steps in one timed block; early and late blocks alternate."""
BATCH = 4_000
"""Events in one bulk append."""


class Count(BaseModel):
    """What the runs count."""

    n: int = 0


signal_flow: uw.Flow[Count, Any] = uw.Flow("long_signals", state=Count)


@signal_flow.step
async def take(ctx: uw.RunContext[Count, Any]) -> Any:
    if ctx.signal is not None:
        ctx.state.n += 1
    return ctx.wait("tick", then=take)


step_flow: uw.Flow[Count, Any] = uw.Flow("long_steps", state=Count)
_left = [0]


@step_flow.step
async def tick(ctx: uw.RunContext[Count, Any]) -> Any:
    ctx.state.n += 1
    _left[0] -= 1
    return ctx.goto(tick) if _left[0] > 0 else ctx.wait("more", then=tick)


# -- building long histories ------------------------------------------------------------
def _started(engine: uw.Engine, flow: uw.Flow[Count, Any]) -> str:
    """A new run of ``flow``, activated once (it waits)."""
    run_id, _ = engine.start(flow, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    asyncio.run(engine.activate(lease))
    return run_id


def _extend(engine: uw.Engine, flow: uw.Flow[Count, Any], build: Callable[[str], Iterator[
        tuple[list[ev.RunEvent], list[str]]]], update: RunUpdate) -> str:
    """Start a run of ``flow`` and append what ``build(run_id)`` yields (events, and the
    signal ids they consume) as the engine writes it: fenced batches under the lease, a
    checkpoint with the last, which hands the run back as ``update`` says."""
    store = engine.store
    run_id, _ = engine.start(flow, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    state, head, _ = engine.journal.load_head(TENANT, run_id)
    pending: list[tuple[int, float, ev.RunEvent]] = []
    consumed: list[str] = []
    at = time.time()

    def flush(last: bool) -> None:
        nonlocal head, pending, consumed
        blobs: dict[str, bytes] = {}
        checkpoint = None
        if last:
            stored, checkpoint = engine.journal.encode_checkpointed(state, pending, head, blobs)
        else:
            stored = engine.journal.encode(TENANT, run_id, pending, head, blobs)
        store.append(AppendBatch(
            tenant_id=TENANT, run_id=run_id, expected_seq=pending[0][0] - 1,
            fence=lease.token, events=stored, now=time.time(), blobs=blobs,
            update=update if last else None, checkpoint=checkpoint,
            consumed_signals=consumed, release=last,
        ))
        head, pending, consumed = stored[-1].hash, [], []

    for events, ids in build(run_id):
        if len(pending) >= BATCH:  # the last chunk always goes with the checkpoint
            flush(False)
        for event in events:
            at += 0.0001
            rec = Recorded(state.seq + 1, at, event)
            apply(state, rec)
            pending.append((rec.seq, rec.at, event))
        consumed += ids
    flush(True)
    return run_id


def _step(step: str, n: int | None) -> list[ev.RunEvent]:
    """The events of one step that goes on to itself (``n``: the count it sets)."""
    patch = [] if n is None else [{"op": "replace", "path": "/n", "value": n}]
    return [ev.StepStarted(step=step, attempt=1, worker="bench"),
            ev.StepCompleted(step=step, next=step, patch=patch)]


def _insert_signals(store: Any, url: str, run_id: str, names: list[str],
                    ids: list[str]) -> None:
    """Put signals in a run's inbox in one statement (sealed as the client seals them)."""
    codec = store.codec
    rows = [(TENANT, run_id, sid, name,
             codec.seal(canonical_json(i), signal_where(TENANT, sid, name)), None, float(i))
            for i, (name, sid) in enumerate(zip(names, ids, strict=True))]
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db, db:
            db.executemany("INSERT INTO signals (tenant_id, run_id, signal_id, name, payload,"
                           " sender, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        return
    with store.pool.connection() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO signals (tenant_id, run_id, signal_id, name, payload,"
                        " sender, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)


def build_signals(engine: uw.Engine, url: str, consumed: int) -> str:
    """A run of ``signal_flow`` waiting for ``tick`` once it has consumed ``consumed``."""
    ids = [f"old-{i:07d}" for i in range(consumed)]

    def build(run_id: str) -> Iterator[tuple[list[ev.RunEvent], list[str]]]:
        _insert_signals(engine.store, url, run_id, ["tick"] * consumed, ids)
        yield [*_step("take", None), ev.SignalAwaited(signal="tick")], []
        for i, sid in enumerate(ids):
            yield [ev.SignalReceived(signal="tick", signal_id=sid, payload=i, sender=None),
                   *_step("take", i + 1), ev.SignalAwaited(signal="tick")], [sid]

    return _extend(engine, signal_flow, build, RunUpdate("waiting", "take", None, "tick"))


def build_steps(engine: uw.Engine, events: int) -> str:
    """A run of ``step_flow`` waiting for ``more`` after ``events`` events or one more."""
    def build(run_id: str) -> Iterator[tuple[list[ev.RunEvent], list[str]]]:
        for k in range(max((events - 2) // 2, 1)):
            yield _step("tick", k + 1), []
        yield [ev.SignalAwaited(signal="more")], []

    return _extend(engine, step_flow, build, RunUpdate("waiting", "tick", None, "more"))


def _verified(engine: uw.Engine, run_id: str, at_least: int) -> int:
    """The run's event count, once its whole journal verifies."""
    verdict = engine.journal.verify(TENANT, run_id)
    if not verdict.ok or verdict.events < at_least:
        raise RuntimeError(f"built history of {run_id} does not verify: {verdict}")
    return verdict.events


_PROBE = ("SELECT signal_id FROM signals WHERE tenant_id = %s AND run_id = %s AND NOT consumed"
          " AND name = 'tick' ORDER BY created_at, signal_id COLLATE \"C\" LIMIT 1")
"""The inbox probe of ``actionable_signals`` and ``settle_run``: the oldest unconsumed
signal a run waits for, on the partial index of unconsumed signals."""


def _probe_pages(store: Any, run_id: str) -> int:
    """Index and heap pages the inbox probe reads for the run (PostgreSQL)."""
    with store.pool.connection() as conn:
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _PROBE,
                                (TENANT, run_id)).fetchall()
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def _vacuumed(store: Any, url: str) -> None:
    """On PostgreSQL, VACUUM (ANALYZE) the tables a bulk build wrote, as autovacuum does
    over the months a run takes to consume that many signals. A consumed signal's entry in
    the partial index of unconsumed ones stays, dead, until a vacuum removes it. The inbox
    probe of the run walks those entries: the build makes them all at once."""
    if url.startswith("sqlite"):
        return
    with store.pool.connection() as conn:
        conn.autocommit = True
        conn.execute("VACUUM (ANALYZE) signals, events, runs, checkpoints")


# -- measuring ------------------------------------------------------------------------------
def _signal_block(engine: uw.Engine, run_id: str, name: str) -> Callable[[int], Awaitable[None]]:
    """Send ``name`` to the run, claim it and activate it, ``n`` times."""
    async def block(n: int) -> None:
        for _ in range(n):
            engine.signal(run_id, name, 1, tenant_id=TENANT)
            [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
            await engine.activate(lease)
    return block


def _step_block(engine: uw.Engine, run_id: str) -> Callable[[int], Awaitable[None]]:
    """Wake the loop and let it take ``n`` steps."""
    async def block(n: int) -> None:
        _left[0] = n
        engine.signal(run_id, "more", None, tenant_id=TENANT)
        [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
        await engine.activate(lease)
    return block


def _send_block(engine: uw.Engine, run_id: str) -> Callable[[int], Awaitable[None]]:
    """Send ``n`` signals the run does not wait for."""
    async def block(n: int) -> None:
        for _ in range(n):
            engine.signal(run_id, "note", None, tenant_id=TENANT)
    return block


def _load_block(engine: uw.Engine, run_id: str) -> Callable[[int], Awaitable[None]]:
    """Load the run's state (checkpoint + tail) ``n`` times."""
    async def block(n: int) -> None:
        for _ in range(n):
            engine.journal.load_head(TENANT, run_id)
    return block


def interleaved(early: Callable[[int], Awaitable[None]],
                late: Callable[[int], Awaitable[None]], total: int,
                block: int = BLOCK) -> tuple[float, float]:
    """Seconds per item of ``early`` and ``late``, median over alternating blocks."""
    times: dict[str, list[float]] = {"early": [], "late": []}

    async def run() -> None:
        for fn in (early, late):  # a warm-up block each, not timed
            await fn(block)
        for _ in range(total // block):
            for key, fn in (("early", early), ("late", late)):
                began = time.perf_counter()
                await fn(block)
                times[key].append((time.perf_counter() - began) / block)

    asyncio.run(run())
    return median(times["early"]), median(times["late"])


def _pair(db: str, what: str, early: float, late: float, unit_note: str,
          note: str) -> list[Figure]:
    """The early figure (the baseline) and the late one, its ratio against it."""
    ratio = late / early
    small, big = ("empty", f"{LONG // 1000}k") if what.startswith("inbox") else \
        ("1k", f"{LONG // 1000}k")
    return [
        Figure(f"{db}.long_{what}_{small}", early * 1000, "ms", note=unit_note),
        Figure(f"{db}.long_{what}_{big}", late * 1000, "ms", early * 1000, ratio,
               "ratio <= 1.2", ratio <= 1.2, note=note),
    ]


def _figures(db: str, url: str, store: Any) -> list[Figure]:
    engine = uw.Engine(store, flows=[signal_flow, step_flow])
    out: list[Figure] = []

    # Signals consumed one per wait.
    began = time.perf_counter()
    # The warm-up block takes BLOCK signals too: the late run ends at LONG exactly.
    late_run = build_signals(engine, url, LONG - WINDOW - BLOCK)
    events = _verified(engine, late_run, 4 * (LONG - WINDOW - BLOCK))
    built = time.perf_counter() - began
    early_run = _started(engine, signal_flow)
    pages = None if url.startswith("sqlite") else (
        _probe_pages(store, early_run), _probe_pages(store, late_run))
    _vacuumed(store, url)
    early, late = interleaved(_signal_block(engine, early_run, "tick"),
                              _signal_block(engine, late_run, "tick"), WINDOW)
    for run_id, n in ((early_run, WINDOW + BLOCK), (late_run, LONG)):
        state = engine.journal.load(TENANT, run_id)
        if state.state != {"n": n} or store.pending_signals(TENANT, run_id):
            raise RuntimeError(f"run {run_id} consumed {state.state}, expected {n}")
    out += _pair(db, "signal", early, late, "per consumed signal: send, claim, activate",
                 f"the last {WINDOW:,} of {LONG:,} signals ({events:,} events built and "
                 f"verified in {built:.0f}s) against the first {WINDOW + BLOCK:,}, "
                 "after VACUUM (ANALYZE)" * (pages is not None))
    if pages is not None:
        after = (_probe_pages(store, early_run), _probe_pages(store, late_run))
        for when, (few, many) in (("unvacuumed", pages), ("vacuumed", after)):
            out.append(Figure(
                f"{db}.long_signal_probe_pages_{LONG // 1000}k_{when}", many, "pages", few,
                many / max(few, 1), note=f"pages the inbox probe reads, {when}, against "
                "a young run's: dead index entries of the consumed signals until a VACUUM"))

    # Steps, and checkpoints written and loaded.
    began = time.perf_counter()
    young, old = build_steps(engine, 1_000), build_steps(engine, LONG)
    events = _verified(engine, old, LONG - 10)
    _vacuumed(store, url)
    built = time.perf_counter() - began
    early, late = interleaved(_step_block(engine, young), _step_block(engine, old), WINDOW)
    out += _pair(db, "step", early, late, "per goto step, one commit each",
                 f"at {events:,} events (built in {built:.0f}s) against ~1,000")
    engine.checkpoint_every = 1
    early, late = interleaved(_step_block(engine, young), _step_block(engine, old), WINDOW)
    engine.checkpoint_every = 100
    out += _pair(db, "checkpoint_write", early, late, "per step with a checkpoint each",
                 f"at {events:,} events against ~2,000")
    early, late = interleaved(_load_block(engine, young), _load_block(engine, old), 4_000,
                              block=200)
    out += _pair(db, "checkpoint_load", early, late, "a fresh load of the run's state",
                 "checkpoint + tail, after as many events")

    # An inbox the run never reads.
    began = time.perf_counter()
    unread = _started(engine, signal_flow)
    _insert_signals(store, url, unread, ["note"] * LONG,
                    [f"note-{i:07d}" for i in range(LONG)])
    built = time.perf_counter() - began
    empty = _started(engine, signal_flow)
    _vacuumed(store, url)
    early, late = interleaved(_signal_block(engine, empty, "tick"),
                              _signal_block(engine, unread, "tick"), WINDOW // 2)
    out += _pair(db, "inbox_activation", early, late,
                 "per consumed signal of a run whose inbox holds no other",
                 f"with {LONG:,} signals it does not wait for in its inbox "
                 f"(inserted in {built:.0f}s)")
    early, late = interleaved(_send_block(engine, empty), _send_block(engine, unread),
                              WINDOW // 2)
    out += _pair(db, "inbox_send", early, late, "client.signal into an empty inbox",
                 f"into an inbox of {LONG:,} unread signals")
    return out


def bench_sqlite() -> list[Figure]:
    """Long runs on SQLite."""
    with sqlite_dir() as d:
        url = f"sqlite:///{d}/long-{uuid.uuid4().hex[:8]}.db"
        store = connect(url)
        try:
            return _figures("sqlite", url, store)
        finally:
            store.close()


@contextmanager
def _own_database() -> Iterator[str]:
    """A fresh database on the benchmark server, dropped afterwards. A VACUUM removes only
    what no open transaction of the same database may still see: another job's long
    transaction in a shared database would keep every dead entry this benchmark makes."""
    import psycopg

    base = pg_base_url()
    parts = urlsplit(base)
    name = f"bench_long_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def bench_postgres() -> list[Figure]:
    """Long runs on PostgreSQL (skipped without a PostgreSQL store)."""
    if pg_store_missing():
        return []
    with _own_database() as url:
        store = connect(url)
        try:
            return _figures("postgres", url, store)
        finally:
            store.close()
