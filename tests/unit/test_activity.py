"""``Client.activity``: a tenant's figures per day are counted from the events stamped in
each day — an approval requested before the window and decided in it counts its whole
wait — and only the journals of runs written in the window are read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.activity_flows import COST, TOKENS_IN, TOKENS_OUT, metered
from fakes.invoice_flows import refunds
from underway.client import Activity, ActivityDay
from underway.errors import ConfigurationError
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.runner import Runner
from underway.testing import memory_engine

DAY = 86_400.0
MIDNIGHT = 1_800_000_000 - 1_800_000_000 % DAY


def test_a_day_counts_what_was_journaled_that_day() -> None:
    engine, clock = memory_engine([metered, refunds])
    key = approver(engine)

    def drive() -> None:
        asyncio.run(Runner(engine).run_until_idle())

    clock.t = MIDNIGHT - 600  # ten minutes before the window
    engine.start(metered, {"invoice": "A"})
    refund, _ = engine.start(refunds, {"invoice": "B", "amount": 5})
    drive()
    clock.t = MIDNIGHT + 600
    asked = engine.state(refund).pending_approval
    assert asked is not None
    engine.submit_decision(sign_decision(
        key, request_id=asked.request_id, run_id=refund, tenant_id="default",
        tool="refund", args_hash=asked.args_hash, decision="approve",
        expires_at=asked.expires_at, approver_id="fin").model_dump(mode="json"))
    engine.start(metered, {"invoice": "C"})
    drive()
    clock.t = MIDNIGHT + 2 * DAY  # the window's end: not in it
    engine.start(metered, {"invoice": "D"})
    drive()

    found = engine.client.activity(since=MIDNIGHT, days=2)
    assert isinstance(found, Activity) and found.until == MIDNIGHT + 2 * DAY
    first, second = found.days
    assert (first.start, second.start) == (MIDNIGHT, MIDNIGHT + DAY)
    assert first.runs == {"completed": 1}  # the runs created before the window are not
    assert (first.model_calls, first.tokens_in, first.tokens_out, first.cost_usd) == (
        1, TOKENS_IN, TOKENS_OUT, COST)
    assert first.approval_waits == [1200.0]
    assert (first.approvals_expired, first.escalations, first.dead_lettered) == (0, {}, 0)
    assert second == quiet(MIDNIGHT + DAY)
    # Read: the refund (written at +600) and the run created inside; not the one finished
    # before the window, nor the one created after it.
    assert found.runs_read == 2 and found.unreadable == []
    eve = engine.client.activity(since=MIDNIGHT - DAY, days=1).days[0]
    assert eve.model_calls == 1 and eve.runs == {"completed": 2}


def test_another_tenants_runs_are_not_counted() -> None:
    engine, clock = memory_engine([metered])
    clock.t = MIDNIGHT + 60
    engine.client.start("metered", {"invoice": "A"}, tenant_id="globex")
    asyncio.run(Runner(engine).run_until_idle())
    mine = engine.client.activity(since=MIDNIGHT, days=1, tenant_id="acme")
    assert mine.days == [quiet(MIDNIGHT)] and mine.runs_read == 0
    theirs = engine.client.activity(since=MIDNIGHT, days=1, tenant_id="globex").days[0]
    assert theirs.model_calls == 1 and theirs.runs == {"completed": 1}


@pytest.mark.parametrize("days", [0, -1, 367, 1.5, True, "7"])
def test_the_window_is_a_whole_number_of_days(days: Any) -> None:
    engine, _ = memory_engine()
    with pytest.raises(ConfigurationError, match="days must be a whole number"):
        engine.client.activity(since=MIDNIGHT, days=days)


def test_since_is_a_time() -> None:
    engine, _ = memory_engine()
    with pytest.raises(ConfigurationError, match="since must be a time"):
        engine.client.activity(since=float("nan"), days=1)


def approver(engine: uw.Engine) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.generate()
    register_approver(engine.store, "fin", public_key=public_key_of(key), roles=["finance"],
                      now=MIDNIGHT - DAY)
    return key


def quiet(start: float) -> ActivityDay:
    return ActivityDay(start=start, runs={}, model_calls=0, tokens_in=0, tokens_out=0,
                       cost_usd=0.0, approval_waits=[], approvals_expired=0, escalations={},
                       dead_lettered=0)
