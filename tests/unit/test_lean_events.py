"""The lean stored form of events: what a step stores, how old events still read the same,
and how the chain commits to the seq and type an envelope no longer names."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.errors import IntegrityError
from underway.store.base import StoredEvent
from underway.testing import memory_engine


class N(BaseModel):
    n: int = 0


class Args(BaseModel):
    i: int


async def look(args: Args) -> dict[str, Any]:
    return {"i": args.i, "text": "x" * 50}


LOOK = uw.tool(look, name="look", read_only=True)


def looping_flow(pause_at: int | None = None, steps: int = 6) -> uw.Flow[N, Any]:
    """A flow of ``steps`` steps, each calling a read-only tool; after ``pause_at`` steps
    it waits for the signal ``go on``."""
    flow = uw.Flow("loop", state=N)

    @flow.step
    async def go(ctx: uw.RunContext[N, Any]) -> Any:
        await ctx.call(LOOK, {"i": ctx.state.n})
        ctx.state.n += 1
        if ctx.state.n == pause_at:
            return ctx.wait("go on", then=go)
        return ctx.goto(go) if ctx.state.n < steps else ctx.done(ctx.state.n)

    return flow


def _old_form(event: ev.RunEvent, seq: int, at: float) -> bytes:
    """An event as every event was stored before the lean form: the whole dump, defaults
    and key spelled out, latency in ms, seq, type and version in the envelope."""
    data = event.model_dump(mode="json")
    event_type = data.pop("type")
    return ev.canonical_json({"at": at, "data": data, "seq": seq, "type": event_type, "v": 1})


def test_a_step_is_stored_lean_and_reads_back_whole() -> None:
    engine, _ = memory_engine([looping_flow()], [LOOK])
    run_id, _ = engine.start("loop")
    assert asyncio.run(uw.Runner(engine).run_until_complete(run_id)).status == "completed"
    stored = engine.store.load_events("default", run_id)
    done = next(s for s in stored if s.type == "ToolSucceeded")
    env = json.loads(done.payload)
    assert set(env) == {"at", "data"}  # seq, type and v (1) live in the row
    data = env["data"]
    assert data["key_in_run"] == "0:go:0" and "key" not in data
    assert type(data["latency_us"]) is int and "latency_ms" not in data
    assert not {"reconciled", "counts", "sensitive_fields", "secret_fields"} & set(data)
    started = next(s for s in stored if s.type == "StepStarted")
    # attempt 1 left out; the worker that ran the attempt kept
    assert json.loads(started.payload)["data"] == {"step": "go", "worker": engine.owner}

    rec = next(r for r in engine.journal.history("default", run_id)
               if isinstance(r.event, ev.ToolSucceeded))
    assert rec.event.key == f"{run_id}:0:go:0"
    assert rec.event.reconciled is False and rec.event.counts is None
    assert rec.event.latency_ms == data["latency_us"] / 1000
    assert engine.journal.verify("default", run_id).ok


def test_an_event_in_the_old_form_reads_as_the_same_event() -> None:
    event = ev.ToolSucceeded(key="r-1:3:go:0", tool="look", index=0, args_hash="ab" * 32,
                             result={"i": 1}, latency_ms=12.3456789)
    assert event.latency_ms == 12.346  # kept to the microsecond the journal stores
    lean = ev.envelope(event, seq=7, at=1.5, run_id="r-1")
    assert lean["data"]["key_in_run"] == "3:go:0" and lean["data"]["latency_us"] == 12346
    old = json.loads(_old_form(event, 7, 1.5))
    assert old["data"]["latency_ms"] == 12.346 and old["data"]["reconciled"] is False
    assert ev.from_envelope(old) == ev.from_envelope(lean, "r-1") == event
    # A key of another run (a fork's copied call) is stored whole.
    assert ev.envelope(event, seq=7, at=1.5, run_id="r-2")["data"]["key"] == "r-1:3:go:0"
    with pytest.raises(IntegrityError):
        ev.from_envelope(lean)  # its key cannot be had without its run


def test_the_link_commits_to_the_rows_seq_and_type() -> None:
    engine, _ = memory_engine([looping_flow()], [LOOK])
    run_id, _ = engine.start("loop")
    assert asyncio.run(uw.Runner(engine).run_until_complete(run_id)).status == "completed"
    events = engine.store._events[("default", run_id)]
    i = next(n for n, s in enumerate(events) if s.type == "StepCompleted")
    original = events[i]
    # The payload says nothing of its type: relabelling the row must break the chain.
    events[i] = dataclasses.replace(original, type="StepStarted")
    result = engine.journal.verify("default", run_id)
    assert not result.ok and result.bad_seq == original.seq
    assert "hash does not match" in result.reason
    # An envelope that names one of seq and type but not the other is refused.
    env = json.loads(original.payload)
    half = ev.canonical_json({**env, "seq": original.seq})
    events[i] = StoredEvent(original.seq, original.type, half,
                            ev.chain_hash(events[i - 1].hash, half))
    result = engine.journal.verify("default", run_id)
    assert not result.ok and result.bad_seq == original.seq
    assert "seq/type" in result.reason
    assert ev.placed(env, original.seq, original.type)["type"] == original.type
    with pytest.raises(ValueError):
        ev.placed({"seq": original.seq, "at": 1.0}, original.seq, original.type)


def test_a_journal_begun_in_the_old_form_goes_on_in_the_new() -> None:
    """A run whose first events were stored before the lean form (a run in flight across
    an upgrade): they keep their old link, the new events chain on from them."""
    engine, _ = memory_engine([looping_flow(pause_at=3)], [LOOK])
    run_id, _ = engine.start("loop")
    asyncio.run(uw.Runner(engine).run_until_idle())
    key = ("default", run_id)
    store = engine.store
    prev = ev.genesis_hash(*key)
    old: list[StoredEvent] = []
    for rec in engine.journal.history(*key):
        payload = _old_form(rec.event, rec.seq, rec.at)
        prev = ev.chain_hash(prev, payload)
        old.append(StoredEvent(rec.seq, rec.event.type, payload, prev))
    store._events[key] = list(old)
    store._checkpoints.pop(key, None)  # it was bound to the hashes replaced here
    row = store._runs[key]
    assert row.status == "waiting" and row.last_seq == len(old)
    store._runs[key] = dataclasses.replace(row, last_hash=old[-1].hash)
    assert engine.journal.verify(*key).ok

    engine.signal(run_id, "go on", None)
    state = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert state.status == "completed" and state.steps_completed == 6
    stored = store.load_events(*key)
    assert stored[:len(old)] == old
    assert len(stored) > len(old)
    assert all(set(json.loads(s.payload)) <= {"at", "data", "checkpoint"}
               for s in stored[len(old):])
    assert engine.journal.verify(*key).ok
