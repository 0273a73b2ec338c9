"""Audit verification around the run row, which records the journal head at hand-back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.events import canonical_json, chain_hash
from underway.store.base import StoredEvent
from underway.testing import memory_engine


class Crash(BaseException):
    """Abandons an activation as a SIGKILL would."""


class N(BaseModel):
    n: int = 0


def looping_flow(crash_at: int | None) -> uw.Flow[N, Any]:
    flow = uw.Flow("loop", state=N)

    @flow.step
    async def go(ctx: uw.RunContext[N, Any]) -> Any:
        ctx.state.n += 1
        if ctx.state.n == crash_at:
            raise Crash
        return ctx.goto(go) if ctx.state.n < 10 else ctx.done(ctx.state.n)

    return flow


def test_a_tail_written_after_the_last_hand_back_verifies() -> None:
    engine, _ = memory_engine([looping_flow(crash_at=6)])
    run_id, _ = engine.start("loop")
    with pytest.raises(Crash):
        asyncio.run(uw.Runner(engine).run_until_idle())
    row = engine.store.get_run("default", run_id)
    events = engine.store.load_events("default", run_id)
    assert row is not None and row.last_seq < len(events)  # steps committed, row not moved
    assert engine.journal.verify("default", run_id).ok


def test_events_after_the_end_of_a_finished_run_are_reported() -> None:
    engine, _ = memory_engine([looping_flow(crash_at=None)])
    run_id, _ = engine.start("loop")
    assert asyncio.run(uw.Runner(engine).run_until_complete(run_id)).status == "completed"
    stored = engine.store.load_events("default", run_id)
    last = stored[-1]
    # A well-formed, correctly chained event appended after RunCompleted.
    payload = canonical_json({"at": 0, "data": {"step": "go"}, "seq": last.seq + 1,
                              "type": "StepStarted", "v": 1})
    forged = StoredEvent(last.seq + 1, "StepStarted", payload, chain_hash(last.hash, payload))
    engine.store._events[("default", run_id)].append(forged)
    result = engine.journal.verify("default", run_id)
    assert not result.ok and result.bad_seq == last.seq + 1
    assert "follow the end of a completed run" in result.reason


def test_a_deleted_tail_of_a_handed_back_run_is_reported() -> None:
    engine, _ = memory_engine([looping_flow(crash_at=None)])
    run_id, _ = engine.start("loop")
    asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    engine.store._events[("default", run_id)].pop()
    result = engine.journal.verify("default", run_id)
    assert not result.ok and "journal ends at" in result.reason
