"""Counterfactual replay on small flows: what the original got — signals, answers,
approvals and rejections, values, child runs — is given again; what it never got is a
divergence, stopped at or stubbed; an unfinished original is replayed as far as it went."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.engine import Engine
from underway.guard.policy import policy_from_dict
from underway.ops.replay import ReplayResult, replay_run
from underway.testing import ManualClock, MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from guard_helpers import Approver, drive

HOLD = policy_from_dict({"version": "v1", "rules": [
    {"id": "refunds-need-finance", "tools": ["refund"], "outcome": "require_approval",
     "approver_role": "finance"}]})


class Case(BaseModel):
    notes: list[Any] = []


@uw.tool(mutating=False)
async def lookup(args: Any) -> dict[str, Any]:
    return {"owed": 40}


@uw.tool(amount="amount", currency="INR")
async def refund(args: Any) -> dict[str, Any]:
    return {"refunded": args["amount"]}


@uw.tool
async def notify(args: Any) -> dict[str, Any]:
    return {"sent": True}


def case_flow(*, bigger: bool = False, notify_first: bool = False) -> uw.Flow[Case, Any]:
    flow = uw.Flow("case", state=Case, policy=HOLD, tools=[lookup, refund, notify])

    @flow.step(start=True)
    async def open_case(ctx: uw.RunContext[Case, Any]) -> Any:
        ctx.state.notes.append(ctx.uuid())
        ctx.state.notes.append((await ctx.call(lookup, {}))["owed"])
        return ctx.wait("customer", timeout=3600, then=decide)

    @flow.step
    async def decide(ctx: uw.RunContext[Case, Any]) -> Any:
        ctx.state.notes.append(ctx.signal)
        ctx.state.notes.append(await ctx.ask("refund it?", role="finance"))
        if notify_first:
            try:
                await ctx.call(notify, {})
            except uw.ToolCallError as exc:
                ctx.state.notes.append(exc.error_type)
        amount = 50 if bigger else 40
        try:
            ctx.state.notes.append((await ctx.call(refund, {"amount": amount}))["refunded"])
        except uw.ToolCallError as exc:
            ctx.state.notes.append(exc.error_type)
        return ctx.done(ctx.state.notes)

    return flow


def world(tmp_path: Path) -> tuple[Engine, ManualClock, Approver]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = MemoryStore()
    store.migrate()
    clock = ManualClock(1.7e9)
    engine = Engine(store, flows=[case_flow()], clock=clock)
    return engine, clock, Approver(engine, tmp_path, "fin", ("finance",))


def answer(engine: Engine, approver: Approver, run_id: str, text: str) -> None:
    s = engine.state(run_id)
    assert s.escalation is not None
    engine.submit_decision(approver.decide(
        s, "answer", request_id=s.escalation.request_id, tool="", args_hash="",
        answer=text, expires_at=engine.clock.now() + 3600))


def finished_case(tmp_path: Path, *, verdict: str = "approve") -> tuple[Engine, str, Approver]:
    engine, _, approver = world(tmp_path)
    run_id, _ = engine.start("case")
    drive(engine, run_id)
    engine.signal(run_id, "customer", {"says": "please"}, signal_id="sig-1", sender="desk")
    drive(engine, run_id)
    answer(engine, approver, run_id, "yes")
    held = drive(engine, run_id)
    engine.submit_decision(approver.decide(held, verdict, comment="checked the ledger"))
    assert drive(engine, run_id).status == "completed"
    return engine, run_id, approver


def replay(engine: Engine, run_id: str, flow: uw.Flow[Any, Any], **options: Any) -> ReplayResult:
    return asyncio.run(replay_run(engine.store, run_id, flows=[flow], **options))


def test_what_the_original_got_is_given_again(tmp_path: Path) -> None:
    for verdict in ("approve", "reject"):
        engine, run_id, _ = finished_case(tmp_path / verdict, verdict=verdict)
        before = engine.store.journal_heads()
        result = replay(engine, run_id, case_flow())
        assert result.changes == [] and result.stopped is None
        assert result.replay.result == result.original.result == engine.state(run_id).result
        # The uuid, the signal, the answer and the decision (by the same approver, with the
        # same comment) all came back as they were.
        notes = result.replay.result
        assert notes[2] == {"says": "please"} and notes[3] == "yes"
        assert notes[4] == (40 if verdict == "approve" else "ApprovalRejected")
        call = result.replay.calls[-1]
        assert (call.approver, call.comment) == ("fin", "checked the ledger")
        assert engine.store.journal_heads() == before


def test_a_call_with_other_arguments_stops_or_is_stubbed(tmp_path: Path) -> None:
    engine, run_id, _ = finished_case(tmp_path)
    stopped = replay(engine, run_id, case_flow(bigger=True))
    assert stopped.stopped is not None and stopped.stopped.step == "decide"
    assert [c.kind for c in stopped.changes] == ["calls", "diverged"]

    stubbed = replay(engine, run_id, case_flow(bigger=True), on_divergence="stub")
    assert stubbed.replay.status == "completed" and stubbed.stopped is None
    # The stub is the original's refund result: the amount it paid, not the new one.
    assert stubbed.replay.result[-1] == 40
    assert [str(c) for c in stubbed.changes] == [
        "would have made other calls (refund with other arguments)",
        "would have paid a different amount (INR 40.00 → INR 50.00)"]


def test_a_tool_the_original_never_called_fails_as_no_recorded_result(tmp_path: Path) -> None:
    engine, run_id, _ = finished_case(tmp_path)
    stubbed = replay(engine, run_id, case_flow(notify_first=True), on_divergence="stub")
    added = next(c for c in stubbed.replay.calls if c.tool == "notify")
    assert (added.outcome, added.error) == ("failed", "NoRecordedResult")
    assert "would have made other calls (notify added)" in [str(c) for c in stubbed.changes]


def test_an_unfinished_original_is_replayed_as_far_as_it_went(tmp_path: Path) -> None:
    engine, _, _ = world(tmp_path)
    run_id, _ = engine.start("case")
    drive(engine, run_id)
    result = replay(engine, run_id, case_flow())
    assert result.stopped is not None and result.stopped.kind == "end"
    assert "has gone no further" in result.stopped.what
    assert result.changes == []


def test_child_runs_are_answered_from_their_own_journals(tmp_path: Path) -> None:
    child = uw.Flow("child", state=Case, tools=[lookup])

    @child.step
    async def look(ctx: uw.RunContext[Case, Any]) -> Any:
        return ctx.done((await ctx.call(lookup, {}))["owed"])

    parent = uw.Flow("parent", state=Case)

    @parent.step
    async def spawn(ctx: uw.RunContext[Case, Any]) -> Any:
        kid = await ctx.start(child, {})
        outcome = await ctx.wait_for(kid)
        return ctx.done({"child": outcome.result})

    store = MemoryStore()
    store.migrate()
    engine = Engine(store, flows=[parent, child], clock=ManualClock(1.7e9))
    run_id, _ = engine.start(parent)
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).result == {"child": 40}
    result = asyncio.run(replay_run(store, run_id, flows=[parent, child]))
    assert result.changes == [] and result.replay.result == {"child": 40}


def test_a_fork_is_replayed_from_the_state_it_was_given(tmp_path: Path) -> None:
    engine, run_id, approver = finished_case(tmp_path)
    fork = engine.client.fork(run_id, at_seq=engine.state(run_id).seq, by="ops",
                              step="decide", state_patch={"notes": ["forked"]})
    drive(engine, fork.run_id)
    answer(engine, approver, fork.run_id, "sure")
    held = drive(engine, fork.run_id)
    engine.submit_decision(approver.decide(held))
    done = drive(engine, fork.run_id)
    assert done.result == ["forked", None, "sure", 40]
    result = replay(engine, fork.run_id, case_flow())
    assert result.changes == [] and result.replay.result == done.result
