"""Only a real interruption counts as one. A step that continues after its approval, its
question's answer, a retry timer or an operator's resume was not interrupted: `runs
show`, its timeline lines (CLI and console), the evaluation and the worker's takeover
metrics all say so. A crash mid-step is counted, once, everywhere."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.clock import ManualClock
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.guard.policy import Policy, Rule
from underway.journal.state import RunState
from underway.ops.evaluation import evaluate
from underway.runner import Runner
from underway.service.console._events import views
from underway.telemetry import Metrics


class Interrupted(BaseException):
    """Stands in for the worker dying while a tool runs."""


CRASH: list[str] = []
FLAKY: list[str] = []


class Order(BaseModel):
    sku: str = "RICE-25KG"


class Notes(BaseModel):
    warehouse: Any = None


@uw.tool(mutating=False)
def stock(args: Any) -> Any:
    return {"on_hand": 3}


@uw.tool(retry=uw.RetryPolicy(max_attempts=3, initial_interval=5, jitter=False))
def place_po(args: Any) -> Any:
    if CRASH:
        CRASH.pop()
        raise Interrupted  # after its intent was journaled: the outcome is unknown
    if FLAKY:
        FLAKY.pop()
        raise ConnectionError("supplier 503")
    return {"po": "PO-1"}


POLICY = Policy("procure-1", [
    Rule("purchase-orders", tools=["place_po"], outcome="require_approval",
         approver_role="procurement"),
])

replenish: uw.Flow[Notes, Order] = uw.Flow("replenish", state=Notes, input=Order,
                                           policy=POLICY)


@replenish.step(start=True)
async def order(ctx: uw.RunContext[Notes, Order]) -> uw.Next:
    await ctx.call(stock, {"sku": ctx.input.sku})
    ctx.state.warehouse = await ctx.ask("Which warehouse receives it?", role="procurement")
    po = await ctx.call(place_po, {"sku": ctx.input.sku, "qty": 40})
    return ctx.done(po)


class Takeovers(Metrics):
    """Records what the engine tells the metrics on each activation."""

    enabled = True

    def __init__(self) -> None:
        self.activations: list[bool] = []
        self.taken_over: list[str] = []

    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        self.activations.append(takeover)

    def interrupted(self, tenant_id: str, run_id: str, flow: str, events: Any) -> None:
        self.taken_over.append(run_id)


class World:
    def __init__(self, url: str) -> None:
        self.clock = ManualClock(float(int(time.time())))
        self.metrics = Takeovers()
        self.url = url
        self.engine = uw.Engine(uw.connect(url), flows=[replenish], clock=self.clock,
                                metrics=self.metrics)
        self.key = Ed25519PrivateKey.generate()
        register_approver(self.engine.store, "priya", public_key=public_key_of(self.key),
                          roles=["procurement"], now=self.clock.now())

    def drive(self, run_id: str) -> RunState:
        asyncio.run(Runner(self.engine).run_until_idle())
        return self.engine.state(run_id)

    def approve(self, s: RunState) -> None:
        asked = s.pending_approval
        assert asked is not None
        self.engine.submit_decision(sign_decision(
            self.key, request_id=asked.request_id, run_id=s.run_id, tenant_id="default",
            tool=asked.tool, args_hash=asked.args_hash, decision="approve",
            expires_at=asked.expires_at, approver_id="priya").model_dump(mode="json"))

    def answer(self, s: RunState, value: Any) -> None:
        esc = s.escalation
        assert esc is not None
        self.engine.submit_decision(sign_decision(
            self.key, request_id=esc.request_id, run_id=s.run_id, tenant_id="default",
            tool="", args_hash="", decision="answer",
            expires_at=float(esc.expires_at or self.clock.now() + 3600),
            approver_id="priya", answer=value).model_dump(mode="json"))

    def console_steps(self, run_id: str) -> list[str]:
        """The summaries the console's run page shows for the run's step starts."""
        events = uw.Client(self.engine.store).events(run_id)
        return [v.summary for v in views(events) if v.type == "StepStarted"]

    def show(self, run_id: str) -> str:
        result = CliRunner().invoke(app, ["runs", "show", run_id[:10], "--db", self.url])
        assert result.exit_code == 0, result.output
        return result.output


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    CRASH.clear()
    FLAKY.clear()
    w = World(db_url)
    yield w
    w.engine.store.close()


def _through_every_wait(world: World, run_id: str) -> RunState:
    """Drive ``run_id`` through its question, its approval and a retry timer."""
    s = world.drive(run_id)
    assert s.status == "escalated", s.status  # the question
    world.answer(s, "Bhiwandi")
    s = world.drive(run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    FLAKY.append(run_id)
    world.approve(s)
    s = world.drive(run_id)
    assert s.status == "waiting"  # the retry timer of the supplier's 503
    world.clock.advance(10)
    s = world.drive(run_id)
    assert s.status == "completed", (s.status, s.error)
    return s


def test_continuations_after_an_answer_an_approval_and_a_retry_are_not_interruptions(
    world: World,
) -> None:
    run_id = world.engine.start(replenish, {}, run_id="po-calm-1")[0]
    _through_every_wait(world, run_id)
    out = world.show(run_id)
    assert "0 steps resumed after an interruption" in out
    assert "again after an interruption" not in out
    assert "attempt 2 (continues after the answer)" in out
    assert "attempt 3 (continues after the approval)" in out
    assert "attempt 4 (continues after the retry timer)" in out
    assert world.console_steps(run_id) == [
        "step order, attempt 1", "step order, attempt 2 (continues after the answer)",
        "step order, attempt 3 (continues after the approval)",
        "step order, attempt 4 (continues after the retry timer)"]
    assert world.metrics.activations and not any(world.metrics.activations)
    assert world.metrics.taken_over == []
    report = evaluate(world.engine.store, tenant_id="default")
    assert report.recovery.takeovers == 0


def test_a_crash_mid_step_is_one_interruption_everywhere(world: World) -> None:
    run_id = world.engine.start(replenish, {}, run_id="po-crash-1")[0]
    world.answer(world.drive(run_id), "Bhiwandi")
    s = world.drive(run_id)
    CRASH.append(run_id)
    world.approve(s)
    with pytest.raises(Interrupted):
        world.drive(run_id)
    world.clock.advance(world.engine.lease_ttl + 1)
    s = world.drive(run_id)  # taken over: the order's outcome is unknown, a person decides
    assert s.status == "escalated" and s.escalation is not None
    uw.Client(world.engine.store).resolve(run_id, resolution="retry", by="ops")
    assert world.drive(run_id).status == "completed"
    out = world.show(run_id)
    assert "1 step resumed after an interruption" in out
    assert "attempt 4 (again after an interruption)" in out
    assert "attempt 5 (continues after the resolution)" in out
    assert "step order, attempt 4 (again after an interruption)" in world.console_steps(run_id)
    assert world.metrics.activations.count(True) == 1
    assert world.metrics.taken_over == [run_id]
    report = evaluate(world.engine.store, tenant_id="default")
    assert report.recovery.takeovers == 1
