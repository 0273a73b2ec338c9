"""A question may expire: ``ctx.ask(..., expires_in=...)`` wakes the run at the expiry and
the step hears ``QuestionExpired`` (an agent's model hears it as a failed action); an
answer that comes too late is refused."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.agent import Agent
from underway.clock import ManualClock
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.models.types import ModelRequest
from underway.runner import Runner
from underway.testing import RuleModel, say

HOUR = 3600.0


class Notes(BaseModel):
    pass


curious: uw.Flow[Notes, Any] = uw.Flow("curious", state=Notes)


@curious.step
async def ask(ctx: uw.RunContext[Notes, Any]) -> Any:
    try:
        answer = await ctx.ask("Which warehouse ships it?", role="support", expires_in=HOUR)
    except uw.ToolCallError as exc:
        return ctx.done({"no_answer": exc.error_type, "message": exc.message})
    return ctx.done({"answer": answer})


impatient: uw.Flow[Notes, Any] = uw.Flow("impatient", state=Notes)


@impatient.step
async def ask_badly(ctx: uw.RunContext[Notes, Any]) -> Any:
    return ctx.done(await ctx.ask("Now?", expires_in=0))


class World:
    def __init__(self, url: str, flows: list[uw.Flow[Any, Any]]) -> None:
        self.clock = ManualClock(time.time())
        self.engine = uw.Engine(uw.connect(url), flows=flows, clock=self.clock)
        self.key = Ed25519PrivateKey.generate()
        register_approver(self.engine.store, "carol", public_key=public_key_of(self.key),
                          roles=["support"], now=self.clock.now())

    def drive(self, run_id: str) -> uw.RunState:
        asyncio.run(Runner(self.engine).run_until_idle())
        return self.engine.state(run_id)

    def events(self, run_id: str, kind: type[ev.Event]) -> list[Any]:
        return [r.event for r in self.engine.journal.history("default", run_id)
                if isinstance(r.event, kind)]

    def answer(self, s: uw.RunState, value: Any) -> None:
        esc = s.escalation
        assert esc is not None
        self.engine.submit_decision(sign_decision(
            self.key, request_id=esc.request_id, run_id=s.run_id, tenant_id=s.tenant_id,
            tool="", args_hash="", decision="answer", expires_at=float(esc.expires_at),
            approver_id="carol", answer=value,
        ).model_dump(mode="json"))


@pytest.fixture
def world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url, [curious, impatient])
    yield w
    w.engine.store.close()


def test_an_unanswered_question_expires_and_the_step_hears_it(world: World) -> None:
    world.engine.start(curious, None, run_id="q-1")
    s = world.drive("q-1")
    assert s.status == "escalated"
    expires = s.escalation.expires_at
    request_id = s.escalation.request_id
    assert expires == pytest.approx(world.clock.now() + HOUR)
    row = world.engine.store.get_run("default", "q-1")
    assert row is not None and row.next_wake_at == pytest.approx(expires)

    world.clock.advance(HOUR - 1)
    assert world.drive("q-1").status == "escalated"
    assert world.events("q-1", ev.EscalationExpired) == []

    world.clock.advance(1)
    s = world.drive("q-1")
    assert s.status == "completed"
    assert s.result == {"no_answer": "QuestionExpired",
                        "message": "no valid answer arrived before the question expired"}
    [expired] = world.events("q-1", ev.EscalationExpired)
    assert expired.request_id == request_id


def test_an_answer_in_time_is_taken(world: World) -> None:
    world.engine.start(curious, None, run_id="q-2")
    s = world.drive("q-2")
    world.clock.advance(HOUR / 2)
    world.answer(s, {"warehouse": "B"})
    assert world.drive("q-2").result == {"answer": {"warehouse": "B"}}
    assert world.events("q-2", ev.EscalationExpired) == []


def test_an_answer_that_arrives_too_late_is_refused(world: World) -> None:
    world.engine.start(curious, None, run_id="q-3")
    s = world.drive("q-3")
    world.answer(s, {"warehouse": "A"})  # sent in time, but no worker ran until the expiry
    world.clock.advance(HOUR)
    done = world.drive("q-3")
    assert done.result is not None and done.result["no_answer"] == "QuestionExpired"
    [refused] = world.events("q-3", ev.ApprovalInvalid)
    assert refused.reason == "expired"
    assert world.events("q-3", ev.EscalationAnswered) == []


def test_a_question_that_cannot_expire_in_the_future_is_a_clear_error(world: World) -> None:
    world.engine.start(impatient, None, run_id="q-4")
    s = world.drive("q-4")
    assert s.status == "dead" and "expires_in must be a positive number" in str(s.error)


def test_an_agents_unanswered_question_comes_back_to_the_model(tmp_path: Path) -> None:
    def brain(req: ModelRequest) -> Any:
        tool_msgs = [m.content for m in req.messages if m.role == "tool"]
        if tool_msgs and "QuestionExpired" in tool_msgs[-1]:
            return say(None, ("finish", {"result": "went ahead without an answer"}))
        return say(None, ("ask_human", {"question": "May I call the customer?"}))

    agent = Agent("asker", model=RuleModel(brain), tools=[], plan=False,
                  question_ttl=2 * HOUR)
    w = World(f"sqlite:///{tmp_path}/agent.db", [agent.flow])
    w.engine.start(agent.flow, {"goal": "settle INV-9"}, run_id="a-1")
    s = w.drive("a-1")
    assert s.status == "escalated" and s.escalation.question == "May I call the customer?"
    w.clock.advance(2 * HOUR)
    s = w.drive("a-1")
    assert s.status == "completed", s
    assert s.result == {"result": "went ahead without an answer", "iterations": 2}
    w.engine.store.close()


def test_an_agent_refuses_a_question_ttl_that_is_not_positive() -> None:
    with pytest.raises(uw.ConfigurationError, match="question_ttl must be a positive"):
        Agent("asker", model=RuleModel(lambda r: say("x")), tools=[], question_ttl=0)
