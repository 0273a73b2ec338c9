"""A long run's inbox costs what it holds for the run now, not what the run has lived
through: on SQLite and PostgreSQL, an activation of a run that consumed thousands of
signals, and leaves thousands unread, reads the few it acts on and does the database work
of a fresh run's; and signals are consumed once each, in order, across a crash."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from psycopg import sql
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.codec import signal_where
from underway.events import canonical_json
from underway.journal.state import Recorded, RunState, apply
from underway.store import connect, queries
from underway.store.base import AppendBatch, Lease, RunUpdate, SignalRecord

TENANT = "default"
HISTORY = 1_500
"""Signals a long run has consumed, and as many it leaves unread."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_url" if request.param == "postgres"
                                       else "sqlite_url"))


class Seen(BaseModel):
    seen: list[int] = []


class _Crash(BaseException):
    """The worker dies while a step runs: nothing of its activation is committed."""


_crash_at: list[int] = []

loop: uw.Flow[Seen, Any] = uw.Flow("inbox_loop", state=Seen)


@loop.step
async def take(ctx: uw.RunContext[Seen, Any]) -> Any:
    if ctx.signal is not None:
        if _crash_at and ctx.signal == _crash_at[0]:
            _crash_at.clear()
            raise _Crash
        ctx.state.seen.append(int(ctx.signal))
    return ctx.wait("tick", then=take)


def _cycle(engine: uw.Engine, run_id: str, payload: int) -> None:
    """Send the run a ``tick`` and let it take it."""
    engine.signal(run_id, "tick", payload, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    asyncio.run(engine.activate(lease))


def _started(engine: uw.Engine) -> str:
    run_id, _ = engine.start(loop, tenant_id=TENANT)
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    asyncio.run(engine.activate(lease))
    return run_id


def _append(engine: uw.Engine, lease: Lease, state: RunState, head: str,
            events: Sequence[ev.RunEvent], *, consumed: Sequence[str] = (),
            signals: Sequence[SignalRecord] = (), last: bool = False) -> str:
    """Fold, encode and append ``events`` as the engine would; return the new head."""
    pending = []
    for event in events:
        rec = Recorded(state.seq + 1, time.time(), event)
        apply(state, rec)
        pending.append((rec.seq, rec.at, event))
    blobs: dict[str, bytes] = {}
    stored, checkpoint = engine.journal.encode_checkpointed(state, pending, head, blobs)
    engine.store.append(AppendBatch(
        tenant_id=TENANT, run_id=state.run_id, expected_seq=pending[0][0] - 1,
        fence=lease.token, events=stored, now=time.time(), blobs=blobs, checkpoint=checkpoint,
        consumed_signals=list(consumed), signals=list(signals), release=last,
        update=RunUpdate("waiting", "take", None, "tick") if last else None,
    ))
    return stored[-1].hash


def _long_lived(engine: uw.Engine) -> str:
    """A waiting run that consumed ``HISTORY`` signals and leaves as many unread, written
    as the engine writes them (its inbox filled by one append's outbox)."""
    run_id = _started(engine)
    engine.signal(run_id, "tick", 0, tenant_id=TENANT)  # makes it due
    [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
    state, head, _ = engine.journal.load_head(TENANT, run_id)
    names = ["tick"] * HISTORY + ["note"] * HISTORY
    ids = [f"old-{i:05d}" for i in range(2 * HISTORY)]
    sealed = [SignalRecord(TENANT, run_id, sid, name, engine.store.codec.seal(
        canonical_json(i + 1), signal_where(TENANT, sid, name)), None, time.time() + i)
        for i, (name, sid) in enumerate(zip(names, ids, strict=True))]
    first = engine.store.pending_signals(TENANT, run_id)[0].signal_id
    step = [ev.StepStarted(step="take", attempt=1, worker="test"),
            ev.StepCompleted(step="take", next="take", patch=[])]
    head = _append(engine, lease, state, head, [
        ev.SignalReceived(signal="tick", signal_id=first, payload=0, sender=None), *step,
        ev.SignalAwaited(signal="tick")], consumed=[first], signals=sealed)
    taken: list[ev.RunEvent] = []
    for i, sid in enumerate(ids[:HISTORY]):
        taken += [ev.SignalReceived(signal="tick", signal_id=sid, payload=i + 1, sender=None),
                  ev.StepStarted(step="take", attempt=1, worker="test"),
                  ev.StepCompleted(step="take", next="take", patch=[]),
                  ev.SignalAwaited(signal="tick")]
    _append(engine, lease, state, head, taken, consumed=ids[:HISTORY], last=True)
    assert len(engine.store.pending_signals(TENANT, run_id)) == HISTORY
    return run_id


def _inbox_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows each inbox read of the engine returns; reading the whole inbox fails."""
    rows: list[int] = []
    actionable = store.actionable_signals

    def counted(*args: Any, **kwargs: Any) -> Any:
        found = actionable(*args, **kwargs)
        rows.append(len(found))
        return found

    def whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an activation read the run's whole inbox")

    monkeypatch.setattr(store, "actionable_signals", counted)
    monkeypatch.setattr(store, "pending_signals", whole)
    return rows


def _sqlite_steps(store: Any, fn: Callable[[], None]) -> int:
    """SQLite virtual-machine instructions ``fn`` makes the store's connection run."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    conn = store._conn
    conn.set_progress_handler(tick, 10)
    try:
        fn()
    finally:
        conn.set_progress_handler(None, 0)
    return steps[0] * 10


def _rows_touched(plan: dict[str, Any]) -> int:
    """Rows a PostgreSQL plan node and its children produced or filtered away."""
    loops = int(plan.get("Actual Loops", 1))
    own = (int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))) * loops
    return own + sum(_rows_touched(p) for p in plan.get("Plans", []))


_PG_TYPES = {str: "text", bool: "boolean", float: "float8", int: "bigint"}


def _pg_plan(conn: Any, name: str, params: dict[str, Any], mode: str) -> dict[str, Any]:
    """The executed plan of the named PostgreSQL statement, prepared as a worker prepares
    it, under ``plan_cache_mode = mode`` (rolled back)."""
    order: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in order:
            order.append(m.group(1))
        return f"${order.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, queries.load("postgres")[name]).replace("%%", "%")
    types = ", ".join(_PG_TYPES[type(params[k])] for k in order)
    values = sql.SQL(", ").join(sql.Literal(params[k]) for k in order)
    conn.execute(f"PREPARE probe ({types}) AS {text}")
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
            [(doc,)] = conn.execute(sql.SQL(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe ({})").format(values)).fetchall()
    finally:
        conn.execute("DEALLOCATE ALL")  # the store is closed next: nothing of its own lost
    found = doc if isinstance(doc, list) else json.loads(doc)
    return dict(found[0]["Plan"])


def test_an_activation_of_a_long_run_reads_what_it_acts_on(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = connect(store_url)
    try:
        engine = uw.Engine(store, flows=[loop])
        old, young = _long_lived(engine), _started(engine)
        rows = _inbox_reads(store, monkeypatch)
        for i in range(3):
            _cycle(engine, young, 10_000 + i)
            _cycle(engine, old, 20_000 + i)
        # Each activation read its inbox once, and found the one signal it took.
        assert rows == [1] * 6
        assert engine.state(old, tenant_id=TENANT).state["seen"][-3:] == [20_000, 20_001,
                                                                         20_002]
        if store_url.startswith("sqlite"):
            fresh = _sqlite_steps(store, lambda: _cycle(engine, young, 1))
            lived = _sqlite_steps(store, lambda: _cycle(engine, old, 2))
            # Before the inbox was indexed by what is unconsumed, the long run's cycle
            # walked its 3,000 signals (tens of thousands of instructions more).
            assert lived < fresh * 1.5, (fresh, lived)
            return
        checks = [
            ("actionable_signals", {"tenant_id": TENANT, "run_id": old, "waiting": "tick"}),
            ("settle_run", {"tenant_id": TENANT, "run_id": old, "consumed": True,
                            "now": time.time(), "release": True}),
            ("consume_signal", {"tenant_id": TENANT, "run_id": old, "signal_id": "old-00007"}),
            # The journal's head, as the append's fence reads it: one probe, not a walk of
            # the run's thousands of events (the events table has no statistics yet).
            ("last_seq", {"tenant_id": TENANT, "run_id": old}),
        ]
        with store.pool.connection() as conn:
            # As a long-lived inbox is: its statistics say where the rows are.
            conn.execute("ANALYZE signals")
            for name, params in checks:
                # The plan made for these values, and the generic plan a worker's prepared
                # statement settles on: neither walks the run's signals.
                for mode in ("force_custom_plan", "force_generic_plan"):
                    plan = _pg_plan(conn, name, params, mode)
                    assert _rows_touched(plan) <= 10, (name, mode, plan)
    finally:
        store.close()


def test_signals_are_consumed_once_in_order_across_a_crash(store_url: str) -> None:
    store = connect(store_url)
    try:
        first = uw.Engine(store, flows=[loop])
        run_id = _started(first)
        for i in range(12):
            first.signal(run_id, "tick", i, tenant_id=TENANT)
        _crash_at[:] = [5]

        async def drive(engine: uw.Engine) -> None:
            while True:
                leases = engine.claim(tenant_id=TENANT, run_id=run_id)
                if not leases:
                    return
                await engine.activate(leases[0])

        with pytest.raises(_Crash):
            asyncio.run(drive(first))
        # The worker is gone with its lease; its lease expires and another takes over.
        assert store.expire_lease(TENANT, run_id, first.owner) == 1
        second = uw.Engine(store, flows=[loop])
        asyncio.run(drive(second))
        state = second.state(run_id, tenant_id=TENANT)
        assert state.state["seen"] == list(range(12))
        received = [r.event.signal_id for r in second.journal.history(TENANT, run_id)
                    if isinstance(r.event, ev.SignalReceived)]
        assert len(received) == len(set(received)) == 12
        assert store.pending_signals(TENANT, run_id) == []
        assert second.journal.verify(TENANT, run_id).ok
    finally:
        store.close()
