"""Forking a run (``Client.fork``, ``underway runs fork``): a new run from another run's
state at one of its events, linked in both journals, carrying the parent's counters and
never its approvals or pending decisions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.client import Client
from underway.codec import signal_where
from underway.engine import Engine
from underway.errors import ConfigurationError, ConflictError
from underway.events import canonical_json
from underway.guard.policy import policy_from_dict
from underway.journal.state import APPROVAL_SIGNAL, request_id_for
from underway.store import Store
from underway.store.base import SignalRecord
from underway.testing import ManualClock, MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from guard_helpers import Approver, drive, history, of_type

HOLD = policy_from_dict({"version": "v1", "rules": [
    {"id": "payments-need-finance", "tools": ["pay"], "outcome": "require_approval",
     "approver_role": "finance"}]})


class Till(BaseModel):
    amount: int = 0
    paid: int = 0


@uw.tool(mutating=False)
async def quote(args: Any) -> dict[str, Any]:
    return {"amount": 120}


@uw.tool
async def pay(args: Any) -> dict[str, Any]:
    return {"paid": args["amount"]}


flow = uw.Flow("till", state=Till, policy=HOLD, tools=[quote, pay])


@flow.step(start=True)
async def settle(ctx: uw.RunContext[Till, Any]) -> Any:
    ctx.state.amount = ctx.state.amount or (await ctx.call(quote, {}))["amount"]
    ctx.state.paid = (await ctx.call(pay, {"amount": ctx.state.amount}))["paid"]
    return ctx.done({"paid": ctx.state.paid})


@flow.step
async def audit(ctx: uw.RunContext[Till, Any]) -> Any:
    return ctx.done({"audited": ctx.state.paid})


def setup(tmp_path: Path) -> tuple[Engine, ManualClock, Approver, str]:
    """A run that paid 120 after a signed approval."""
    store = MemoryStore()
    store.migrate()
    clock = ManualClock(1.7e9)
    engine = Engine(store, flows=[flow], clock=clock)
    approver = Approver(engine, tmp_path, "fin", ("finance",))
    run_id, _ = engine.start(flow)
    held = drive(engine, run_id)
    engine.submit_decision(approver.decide(held))
    assert drive(engine, run_id).result == {"paid": 120}
    return engine, clock, approver, run_id


def seq_of(engine: Engine, run_id: str, kind: type[ev.Event]) -> int:
    return next(r.seq for r in engine.journal.history("default", run_id)
                if isinstance(r.event, kind))


def test_a_fork_needs_its_own_approval_even_after_the_parent_got_one(tmp_path: Path) -> None:
    engine, _, approver, parent = setup(tmp_path)
    granted = seq_of(engine, parent, ev.ApprovalGranted)
    parent_state = engine.client.state_at(parent, granted)[2]
    assert parent_state.approvals  # the parent held an approval at that seq

    made = engine.client.fork(parent, at_seq=granted, by="ops", reason="pay again")
    assert (made.step, made.parent_step, made.redone) == (
        "settle", "settle", ("quote (succeeded)", "pay (approved)"))
    assert any("approvals" in note for note in made.notes)
    fork = drive(engine, made.run_id)
    assert fork.status == "waiting" and fork.pending_approval is not None
    assert fork.approvals == {}
    own = fork.pending_approval.request_id
    assert own != parent_state.approvals[next(iter(parent_state.approvals))].request_id
    assert made.run_id in own  # the request names the fork's own call

    # The parent's signed decision, slipped into the fork's inbox, settles nothing.
    parent_decision = next(e.decision for e in of_type(engine, parent, ev.ApprovalGranted))
    engine.store.send_signal(_signal(engine, made.run_id, parent_decision))
    still = drive(engine, made.run_id)
    assert still.status == "waiting" and still.pending_approval is not None
    refused = of_type(engine, made.run_id, ev.ApprovalInvalid)
    # It answers a request the fork never made (the parent's).
    assert [r.reason for r in refused] == ["not_pending"]
    assert of_type(engine, made.run_id, ev.ToolStarted) == []

    # Its own decision lets the forked call run.
    engine.submit_decision(approver.decide(still))
    assert drive(engine, made.run_id).result == {"paid": 120}


def _signal(engine: Engine, run_id: str, decision: Any) -> SignalRecord:
    sealed = engine.store.codec.seal(canonical_json(decision),
                                     signal_where("default", "copied", APPROVAL_SIGNAL))
    return SignalRecord("default", run_id, "copied", APPROVAL_SIGNAL, sealed, "attacker",
                        engine.clock.now())


def test_a_fork_of_a_run_waiting_for_approval_asks_anew(tmp_path: Path) -> None:
    engine, _, _, parent = setup(tmp_path)
    requested = seq_of(engine, parent, ev.ApprovalRequested)
    made = engine.client.fork(parent, at_seq=requested, by="ops")
    fork = drive(engine, made.run_id)
    assert fork.pending_approval is not None
    assert fork.pending_approval.request_id == request_id_for(f"{made.run_id}:0:settle:1")
    assert fork.read_calls == 2  # the parent's quote, counted, and the fork's own


def test_both_journals_hold_the_link_and_both_chains_verify(tmp_path: Path) -> None:
    engine, _, _, parent = setup(tmp_path)
    before = len(history(engine, parent))
    made = engine.client.fork(parent, at_seq=3, by="ops", reason="what if")
    linked = history(engine, parent)
    assert len(linked) == before + 1
    assert isinstance(linked[-1], ev.RunForked)
    assert (linked[-1].run_id, linked[-1].seq, linked[-1].by, linked[-1].reason) == (
        made.run_id, 3, "ops", "what if")
    started = history(engine, made.run_id)[0]
    assert isinstance(started, ev.RunStarted) and started.fork is not None
    assert (started.forked_from, started.fork.run_id, started.fork.seq, started.fork.by) == (
        parent, parent, 3, "ops")
    assert engine.client.verify(parent).ok and engine.client.verify(made.run_id).ok
    assert engine.state(parent).status == "completed"
    assert engine.state(made.run_id).forked_from == parent


def test_a_fork_starts_where_asked_with_its_state_patched(tmp_path: Path) -> None:
    engine, _, approver, parent = setup(tmp_path)
    last = engine.state(parent).seq
    with pytest.raises(ConfigurationError, match="had ended at seq"):
        engine.client.fork(parent, at_seq=last, by="ops")
    made = engine.client.fork(parent, at_seq=last, by="ops", step="audit",
                              state_patch={"paid": 99})
    assert drive(engine, made.run_id).result == {"audited": 99}
    made = engine.client.fork(parent, at_seq=1, by="ops", state_patch=[
        {"op": "replace", "path": "/amount", "value": 7}])
    held = drive(engine, made.run_id)
    engine.submit_decision(approver.decide(held))
    assert drive(engine, made.run_id).result == {"paid": 7}


def test_bad_forks_are_refused_naming_the_problem(tmp_path: Path) -> None:
    engine, _, _, parent = setup(tmp_path)
    client = engine.client
    with pytest.raises(ConfigurationError, match="has no event at seq 999"):
        client.fork(parent, at_seq=999, by="ops")
    with pytest.raises(ConfigurationError, match="does not apply"):
        client.fork(parent, at_seq=3, by="ops", state_patch=[
            {"op": "remove", "path": "/nothing/here"}])
    with pytest.raises(ConfigurationError, match="merge patch"):
        client.fork(parent, at_seq=3, by="ops", state_patch="paid=1")
    with pytest.raises(ConfigurationError, match="has no step 'nope'"):
        client.fork(parent, at_seq=3, by="ops", step="nope")
    with pytest.raises(ConfigurationError, match="does not fit Till"):
        client.fork(parent, at_seq=3, by="ops", state_patch={"paid": "lots"})
    with pytest.raises(ConfigurationError, match="who made it"):
        client.fork(parent, at_seq=3, by=" ")
    # Without the flow's code the client cannot check a step; the fork is made and a
    # worker that lacks the step stops it dead, saying why.
    bare = Client(engine.store, clock=engine.clock)
    made = bare.fork(parent, at_seq=3, by="ops", step="nope")
    assert "has no step 'nope'" in str(drive(engine, made.run_id).error)
    assert [e for e in history(engine, parent) if isinstance(e, ev.RunForked)][-1].run_id \
        == made.run_id


def test_a_run_a_worker_is_advancing_is_not_forked(tmp_path: Path) -> None:
    engine, clock, _, parent = setup(tmp_path)
    made = engine.client.fork(parent, at_seq=3, by="ops")
    lease = engine.claim(run_id=made.run_id)[0]
    with pytest.raises(ConflictError, match="being advanced"):
        engine.client.fork(made.run_id, at_seq=1, by="ops")
    clock.advance(engine.lease_ttl + 1)  # its worker is gone: the lease has expired
    again = engine.client.fork(made.run_id, at_seq=1, by="ops")
    assert engine.state(again.run_id).forked_from == made.run_id
    assert lease.run_id == made.run_id


def test_a_store_fork_keeps_the_tenant(tmp_path: Path) -> None:
    engine, _, _, parent = setup(tmp_path)
    store: Store = engine.store
    made = engine.client.fork(parent, at_seq=3, by="ops")
    assert store.get_run("other", made.run_id) is None
    assert store.get_run("default", made.run_id) is not None
