"""A mutating call that timed out or lost its connection after sending is an unknown
outcome: never retried blindly, never recorded as "did not happen". On SQLite and
PostgreSQL, for each way a call can lose track of its request."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.clock import ManualClock
from underway.effects import Reconciled
from underway.engine import Engine
from underway.errors import OutcomeUnknown
from underway.retry import RetryPolicy
from underway.runner import Runner
from underway.store import connect


class S(BaseModel):
    outcome: Any = None
    error: str | None = None


LOSSES = ["timeout", "outcome_unknown", "connection_reset", "broken_pipe"]


async def _lose(how: str) -> None:
    if how == "timeout":
        await asyncio.Event().wait()
    if how == "outcome_unknown":
        raise OutcomeUnknown("connection closed after the request was sent")
    if how == "connection_reset":
        raise ConnectionResetError(errno.ECONNRESET, "connection reset by peer")
    raise BrokenPipeError(errno.EPIPE, "broken pipe")


def _engine(url: str, flow: uw.Flow[Any, Any]) -> Engine:
    return Engine(connect(url), flows=[flow], clock=ManualClock(), lease_ttl=60)


def _drive(engine: Engine, run_id: str, rounds: int = 6) -> Any:
    """Advance the run, letting durable timers fire, until it stops moving."""
    clock = engine.clock
    assert isinstance(clock, ManualClock)
    for _ in range(rounds):
        asyncio.run(Runner(engine).run_until_idle())
        clock.advance(3600)
    return engine.state(run_id)


def _flow(tool: uw.Tool, name: str) -> uw.Flow[Any, Any]:
    flow = uw.Flow(name, state=S, tools=[tool])

    @flow.step
    async def go(ctx: Any) -> Any:
        try:
            ctx.state.outcome = await ctx.call(tool, {"to": "A-1", "amount": 25000})
        except uw.ToolCallError as exc:
            # What a step does with a failure: move on as if nothing happened.
            ctx.state.error = exc.error_type
        return ctx.done({"outcome": ctx.state.outcome, "error": ctx.state.error})

    return flow


@pytest.mark.parametrize("how", LOSSES)
def test_irreversible_call_that_lost_track_runs_once_and_goes_to_a_person(
    db_url: str, how: str
) -> None:
    entries: list[str] = []

    @uw.tool(irreversible=True, timeout=0.2, retry=RetryPolicy(max_attempts=5))
    async def transfer(args: dict[str, Any], info: uw.CallInfo) -> dict[str, Any]:
        entries.append(info.key)
        await _lose(how)
        return {"ok": True}

    engine = _engine(db_url, _flow(transfer, f"lost-{how.replace('_', '-')}"))
    run_id, _ = engine.start(f"lost-{how.replace('_', '-')}")
    s = _drive(engine, run_id)
    assert len(entries) == 1, "an irreversible call that may have happened ran again"
    assert s.status == "escalated" and s.escalation.cause == "unknown_outcome"
    kinds = [type(r.event).__name__ for r in engine.journal.history("default", run_id)]
    assert "RetryScheduled" not in kinds and "RunFailed" not in kinds
    assert "ToolFailed" not in kinds  # never recorded as a failure
    assert s.calls[0].status == "started" and s.calls[0].maybe_happened
    # The person says it happened: the step gets the result, the tool still ran once.
    engine.resolve(run_id, resolution="succeeded", result={"ok": "confirmed"}, by="ops")
    s = _drive(engine, run_id)
    assert s.status == "completed" and s.result == {"outcome": {"ok": "confirmed"},
                                                    "error": None}
    assert len(entries) == 1


@pytest.mark.parametrize("how", LOSSES)
def test_idempotent_call_that_lost_track_is_retried_with_the_same_key_then_escalates(
    db_url: str, how: str
) -> None:
    entries: list[str] = []

    @uw.tool(idempotent=True, timeout=0.2, retry=RetryPolicy(max_attempts=3))
    async def upsert(args: dict[str, Any], info: uw.CallInfo) -> dict[str, Any]:
        entries.append(info.key)
        await _lose(how)
        return {"ok": True}

    name = f"idem-{how.replace('_', '-')}"
    engine = _engine(db_url, _flow(upsert, name))
    run_id, _ = engine.start(name)
    s = _drive(engine, run_id)
    assert len(entries) == 3 and len(set(entries)) == 1, entries
    assert s.status == "escalated" and s.escalation.cause == "unknown_outcome"


@pytest.mark.parametrize("found", ["happened", "not_happened", "unknown"])
def test_reconcile_settles_a_timed_out_call(db_url: str, found: str) -> None:
    entries: list[str] = []
    asked: list[str] = []

    async def reconcile(key: str) -> Reconciled:
        asked.append(key)
        if found == "happened":
            return Reconciled.happened({"ok": "from the ledger"})
        return Reconciled.not_happened() if found == "not_happened" else Reconciled.unknown()

    @uw.tool(irreversible=True, timeout=0.2, reconcile=reconcile)
    async def transfer(args: dict[str, Any], info: uw.CallInfo) -> dict[str, Any]:
        entries.append(info.key)
        await asyncio.Event().wait()
        return {"ok": True}

    name = f"reconcile-{found.replace('_', '-')}"
    engine = _engine(db_url, _flow(transfer, name))
    run_id, _ = engine.start(name)
    s = _drive(engine, run_id)
    assert len(entries) == 1 and asked == entries
    if found == "happened":
        assert s.status == "completed"
        assert s.result == {"outcome": {"ok": "from the ledger"}, "error": None}
    elif found == "not_happened":
        # Now known not to have happened: an ordinary failure the step may handle.
        assert s.status == "completed" and s.result["error"] == "ToolTimedOut"
        assert any(isinstance(r.event, ev.ToolReconciled)
                   for r in engine.journal.history("default", run_id))
    else:
        assert s.status == "escalated" and s.escalation.cause == "unknown_outcome"


def test_read_only_timeout_is_an_ordinary_failure(db_url: str) -> None:
    @uw.tool(read_only=True, timeout=0.2)
    async def look(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    engine = _engine(db_url, _flow(look, "read-timeout"))
    run_id, _ = engine.start("read-timeout")
    s = _drive(engine, run_id)
    assert s.status == "completed" and s.result["error"] == "ToolTimedOut"
