"""A call's facts are computed once per attempt (:class:`~underway.guard.intent.CallIntent`):
the guard's money rule, the budget and the usage journaled with the outcome read the same
money, read once; a later attempt reads it again, at its own moment."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import drive, of_type
from underway import events as ev
from underway.events import JSON
from underway.guard.budgets import Budget
from underway.guard.intent import CallIntent
from underway.guard.policy import policy_from_dict
from underway.money import Money, Unreadable
from underway.retry import RetryPolicy
from underway.testing import memory_engine

reads: list[str] = []
attempts: list[int] = []


@dataclass(frozen=True)
class CountingTool(uw.Tool):
    """A tool that counts how often its money is read."""

    def money(
        self, args: JSON, *, validated: BaseModel | None = None
    ) -> Money | Unreadable | None:
        reads.append(self.name)
        return super().money(args, validated=validated)


class Pay(BaseModel):
    to: str
    amount: Decimal


async def pay(args: Pay) -> dict[str, Any]:
    attempts.append(1)
    if len(attempts) == 1:
        raise RuntimeError("gateway busy")
    return {"paid": str(args.amount)}


PAY = CountingTool(name="pay", fn=pay, args_model=Pay, amount="amount", currency="INR",
                   idempotent=True, retry=RetryPolicy(max_attempts=3, jitter=False))

POLICY = policy_from_dict({
    "version": "1",
    "rules": [{"id": "small", "tools": ["pay"], "outcome": "allow",
               "amount": {"op": "<=", "value": "1000", "currency": "INR"}}],
})


class S(BaseModel):
    out: Any = None


def engine() -> tuple[uw.Engine, Any]:
    reads.clear()
    attempts.clear()
    flow = uw.Flow("pays", state=S, tools=[PAY])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.call(PAY, {"to": "acme", "amount": "250.50"}))

    eng, clock = memory_engine([flow])
    eng.guard.policy = POLICY
    eng.guard.budget = Budget(money={"INR": 10_000})
    return eng, clock


def test_the_money_of_a_call_is_read_once_per_attempt() -> None:
    eng, clock = engine()
    run_id, _ = eng.start("pays", {})
    s = drive(eng, run_id)
    # First attempt: policy (amount rule), budget and usage all judged one reading.
    assert reads == ["pay"]
    assert s.status in ("ready", "waiting")
    clock.advance(5)
    s = drive(eng, run_id)
    assert s.status == "completed", s
    # The retry passed the door again and read the money afresh, once.
    assert reads == ["pay", "pay"]
    (done,) = of_type(eng, run_id, ev.ToolSucceeded)
    assert done.counts == {"money.INR": 250.5}
    decided = of_type(eng, run_id, ev.PolicyDecided)
    assert [d.rule_id for d in decided] == ["small", "small"]


def test_an_intent_holds_the_facts_the_guard_and_ledger_use() -> None:
    reads.clear()
    call = CallIntent.of(PAY, {"to": "acme", "amount": 12}, key="r:0:go:0", index=0,
                         labels=frozenset({"untrusted"}))
    assert reads == ["pay"]
    assert isinstance(call.validated, Pay) and call.validated.amount == Decimal(12)
    assert call.money == Money("INR", Decimal(12), "both")
    assert call.refusal is None and call.schema_error is None
    assert call.usage is not None and call.usage.money == {"INR": 12.0}
    assert call.counts == {"money.INR": 12.0}
    assert call.labels == frozenset({"untrusted"})
    bad = CallIntent.of(PAY, {"to": "acme", "amount": True}, key="k", index=1)
    assert bad.schema_error is not None or bad.refusal is not None
    assert bad.usage is None and bad.counts is None
