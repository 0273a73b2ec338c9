"""Schedules and intake on every backend: a cron tick starts one run however many
schedulers fire it, and an outside event acts once however often it is delivered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from pydantic import BaseModel
from store_backends import Backend

import underway as uw
from underway.clock import ManualClock
from underway.scheduling.cron import utc_iso
from underway.scheduling.intake import (
    IntakeError,
    IntakeEvent,
    IntakeResult,
    Routes,
    Signal,
    StartFlow,
    intake,
    run_key,
)
from underway.scheduling.schedules import (
    add_schedule,
    fire_due_schedules,
    get_schedule,
    list_schedules,
    next_schedule_due,
    remove_schedule,
    tick_key,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
ROUNDS = 8


class Report(BaseModel):
    kind: str = "daily"


class Done(BaseModel):
    pass


report: uw.Flow[Done, Report] = uw.Flow("report", state=Done, input=Report)


@report.step(start=True)
async def write(ctx: uw.RunContext[Done, Report]) -> Any:
    return ctx.done({"kind": ctx.input.kind})


class Invoice(BaseModel):
    number: str
    amount: int = 0


class Seen(BaseModel):
    events: list[Any] = []


invoice: uw.Flow[Seen, Invoice] = uw.Flow("invoice", state=Seen, input=Invoice)


@invoice.step(start=True)
async def await_payment(ctx: uw.RunContext[Seen, Invoice]) -> Any:
    return ctx.wait("paid", then=close)


@invoice.step
async def close(ctx: uw.RunContext[Seen, Invoice]) -> Any:
    ctx.state.events.append(ctx.signal)
    return ctx.done({"paid_by": ctx.signal})


ROUTES = Routes({
    "invoice.created": StartFlow(invoice, signal="amended"),
    "invoice.paid": Signal("paid"),
})


def engine_on(backend: Backend, *flows: uw.Flow[Any, Any], at: float = T0) -> uw.Engine:
    """An engine with its own store (its own connection on SQLite and PostgreSQL)."""
    return uw.Engine(backend.open(), flows=flows, clock=ManualClock(at))


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call on a thread of its own, released at the same moment."""
    gate = threading.Barrier(len(calls))

    def go(call: Callable[[], Any]) -> Any:
        gate.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def fire(engine: uw.Engine) -> Callable[[], int]:
    return lambda: asyncio.run(fire_due_schedules(engine))


def runs_of(engine: uw.Engine, flow: str, tenant_id: str = "default") -> list[uw.store.RunRecord]:
    return [r for r in engine.store.list_runs(tenant_id, limit=1000) if r.flow == flow]


def set_clock(engine: uw.Engine, t: float) -> None:
    clock = engine.clock
    assert isinstance(clock, ManualClock)
    clock.t = t


# -- schedules ----------------------------------------------------------------------------


def test_a_tick_starts_one_run_when_two_schedulers_fire_at_once(backend: Backend) -> None:
    a, b = engine_on(backend, report), engine_on(backend, report)
    add_schedule(a, "every-5", report, "*/5 * * * *", {"kind": "five"})
    for i in range(1, ROUNDS + 1):
        tick = T0 + i * 300
        set_clock(a, tick + 1)
        set_clock(b, tick + 1)
        assert sorted(together(fire(a), fire(b))) == [0, 1]
        keys = {r.idempotency_key for r in runs_of(a, "report")}
        assert tick_key("every-5", tick) in keys
        assert len(keys) == i
    sched = get_schedule(b, "every-5")
    assert sched is not None
    assert sched.next_fire_at == T0 + (ROUNDS + 1) * 300
    assert sched.last_fired_at == T0 + ROUNDS * 300


def test_a_tick_fired_again_after_a_lost_update_still_starts_one_run(backend: Backend) -> None:
    a, b = engine_on(backend, report), engine_on(backend, report)
    add_schedule(a, "hourly", report, "@hourly")
    tick = T0 + 3600
    set_clock(a, tick)
    set_clock(b, tick)
    assert asyncio.run(fire_due_schedules(a)) == 1
    # As if the first scheduler died after starting the run, before moving the schedule on.
    assert a.store.advance_schedule(
        "default", "hourly", expected=tick + 3600, next_fire_at=tick, fired_at=None
    )
    assert asyncio.run(fire_due_schedules(b)) == 0
    assert [r.idempotency_key for r in runs_of(b, "report")] == [tick_key("hourly", tick)]
    sched = get_schedule(b, "hourly")
    assert sched is not None and sched.next_fire_at == tick + 3600


def test_a_claim_keeps_other_schedulers_off_until_it_ends(backend: Backend) -> None:
    a, b = engine_on(backend, report), engine_on(backend, report)
    add_schedule(a, "hourly", report, "@hourly")
    tick = T0 + 3600
    [claimed] = a.store.claim_schedules(now=tick, until=tick + 30, flows=["report"], limit=10)
    assert claimed.name == "hourly" and claimed.claimed_until == tick + 30
    set_clock(b, tick + 10)
    assert asyncio.run(fire_due_schedules(b)) == 0
    set_clock(b, tick + 31)  # the claimer is gone: its claim ran out
    assert asyncio.run(fire_due_schedules(b)) == 1
    assert not a.store.advance_schedule(
        "default", "hourly", expected=tick, next_fire_at=tick + 3600, fired_at=tick
    ), "a late claimer must not move a schedule another scheduler moved on"


def test_missed_ticks_start_only_the_latest(backend: Backend) -> None:
    engine = engine_on(backend, report)
    add_schedule(engine, "hourly", report, "0 * * * *")
    set_clock(engine, T0 + 5 * 3600 + 600)  # five ticks were missed
    assert asyncio.run(fire_due_schedules(engine)) == 1
    assert [r.idempotency_key for r in runs_of(engine, "report")] == [
        tick_key("hourly", T0 + 5 * 3600)]
    sched = get_schedule(engine, "hourly")
    assert sched is not None
    assert (sched.last_fired_at, sched.next_fire_at) == (T0 + 5 * 3600, T0 + 6 * 3600)
    assert asyncio.run(fire_due_schedules(engine)) == 0


def test_a_disabled_schedule_does_not_fire_and_resumes_from_now(backend: Backend) -> None:
    engine = engine_on(backend, report)
    add_schedule(engine, "hourly", report, "@hourly", enabled=False)
    set_clock(engine, T0 + 3 * 3600)
    assert asyncio.run(fire_due_schedules(engine)) == 0
    assert next_schedule_due(engine) is None
    # Enabled again: it waits for its next tick instead of catching up on the missed ones.
    sched = add_schedule(engine, "hourly", report, "@hourly")
    assert sched.enabled and sched.next_fire_at == T0 + 4 * 3600
    assert next_schedule_due(engine) == T0 + 4 * 3600
    assert asyncio.run(fire_due_schedules(engine)) == 0
    set_clock(engine, T0 + 4 * 3600)
    assert asyncio.run(fire_due_schedules(engine)) == 1


def test_a_removed_schedule_does_not_fire(backend: Backend) -> None:
    engine = engine_on(backend, report)
    add_schedule(engine, "hourly", report, "@hourly")
    assert remove_schedule(engine, "hourly")
    assert not remove_schedule(engine, "hourly")
    set_clock(engine, T0 + 3600)
    assert asyncio.run(fire_due_schedules(engine)) == 0
    assert list_schedules(engine) == []
    assert runs_of(engine, "report") == []


def test_declaring_a_schedule_again_keeps_its_pending_tick(backend: Backend) -> None:
    engine = engine_on(backend, report)
    first = add_schedule(engine, "hourly", report, "@hourly", {"kind": "a"})
    set_clock(engine, T0 + 3600 + 5)  # due, not fired yet: say, the deploy restarted workers
    again = add_schedule(engine, "hourly", report, "@hourly", {"kind": "b"})
    assert again.next_fire_at == first.next_fire_at == T0 + 3600
    assert again.created_at == first.created_at and again.input == {"kind": "b"}
    assert asyncio.run(fire_due_schedules(engine)) == 1
    # A new expression starts from now.
    changed = add_schedule(engine, "hourly", report, "30 * * * *")
    assert changed.next_fire_at == T0 + 3600 + 1800 and changed.last_fired_at == T0 + 3600


def test_a_schedule_waits_for_a_worker_that_knows_its_flow(backend: Backend) -> None:
    stranger = engine_on(backend)
    add_schedule(stranger, "nightly", "report", "@daily", {"kind": "nightly"})
    set_clock(stranger, T0 + 86_400)
    assert asyncio.run(fire_due_schedules(stranger)) == 0
    worker = engine_on(backend, report, at=T0 + 86_400)
    assert asyncio.run(fire_due_schedules(worker)) == 1
    [run] = runs_of(worker, "report")
    state = asyncio.run(uw.Runner(worker).run_until_complete(run.run_id))
    assert state.status == "completed" and state.result == {"kind": "nightly"}


def test_a_tick_whose_input_does_not_fit_the_flow_is_skipped(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    add_schedule(engine_on(backend), "broken", "report", "@hourly", {"kind": ["not", "a str"]})
    worker = engine_on(backend, report, at=T0 + 3600)
    assert asyncio.run(fire_due_schedules(worker)) == 0
    assert "schedule 'broken' of tenant 'default': tick 2024-01-01T01:00:00+00:00 skipped" in (
        caplog.text)
    sched = get_schedule(worker, "broken")
    assert sched is not None and sched.next_fire_at == T0 + 7200 and sched.last_fired_at is None


def test_schedules_belong_to_a_tenant_and_runs_to_its_queue(backend: Backend) -> None:
    engine = engine_on(backend, report)
    add_schedule(engine, "same", report, "@hourly", tenant_id="acme", queue="reports")
    add_schedule(engine, "same", report, "30 * * * *", tenant_id="globex")
    assert [s.cron for s in list_schedules(engine, tenant_id="acme")] == ["@hourly"]
    assert [s.cron for s in list_schedules(engine, tenant_id="globex")] == ["30 * * * *"]
    assert list_schedules(engine) == []
    set_clock(engine, T0 + 3600)
    assert asyncio.run(fire_due_schedules(engine)) == 2
    [acme] = runs_of(engine, "report", "acme")
    [globex] = runs_of(engine, "report", "globex")
    assert acme.queue == "reports" and globex.queue == "default"
    assert globex.idempotency_key == tick_key("same", T0 + 1800)


def test_a_schedule_fires_on_its_zone_wall_clock(backend: Backend) -> None:
    engine = engine_on(backend, report, at=datetime(2024, 3, 9, 12, tzinfo=UTC).timestamp())
    sched = add_schedule(engine, "early", report, "30 2 * * *", timezone="America/New_York")
    # 02:30 does not exist in New York on 2024-03-10: it fires when the clocks jump.
    assert utc_iso(sched.next_fire_at) == "2024-03-10T07:00:00+00:00"
    set_clock(engine, sched.next_fire_at)
    assert asyncio.run(fire_due_schedules(engine)) == 1
    after = get_schedule(engine, "early")
    assert after is not None and utc_iso(after.next_fire_at) == "2024-03-11T06:30:00+00:00"


def test_bad_schedules_are_refused_with_the_reason(backend: Backend) -> None:
    engine = engine_on(backend, report)
    with pytest.raises(uw.ConfigurationError, match="minute field '99'"):
        add_schedule(engine, "x", report, "99 * * * *")
    with pytest.raises(uw.ConfigurationError, match="unknown time zone 'Nowhere/Town'"):
        add_schedule(engine, "x", report, "@daily", timezone="Nowhere/Town")
    with pytest.raises(uw.ConfigurationError, match="schedule name 'a b'"):
        add_schedule(engine, "a b", report, "@daily")
    with pytest.raises(uw.ConfigurationError, match="schedule 'x': invalid input for flow"):
        add_schedule(engine, "x", report, "@daily", {"kind": 3})
    assert list_schedules(engine) == []


# -- intake -------------------------------------------------------------------------------


def event(key: str, entity: str = "INV-1", type: str = "invoice.created", **extra: Any) -> Any:
    return {
        "tenant_id": "acme", "entity_id": entity, "event_type": type,
        "occurred_at": "2024-01-01T10:00:00+00:00", "source": "billing",
        "permissions": ["invoices:read"], "idempotency_key": key,
        "payload": {"number": entity, "amount": 120}, **extra,
    }


def test_an_event_starts_a_run_that_owns_its_entity(backend: Backend) -> None:
    engine = engine_on(backend, invoice)
    result = intake(engine, event("k1"), ROUTES)
    assert result.action == "started" and result.run_id is not None
    assert engine.store.entity_owner("acme", "INV-1") == result.run_id
    state = engine.state(result.run_id, tenant_id="acme")
    assert state.input == {"number": "INV-1", "amount": 120}
    run = engine.store.get_run("acme", result.run_id)
    assert run is not None and run.idempotency_key == run_key("k1")
    record = engine.store.get_intake("acme", "k1")
    assert record is not None and (record.action, record.run_id) == ("started", result.run_id)


def test_the_same_event_delivered_twice_acts_once(backend: Backend) -> None:
    engine = engine_on(backend, invoice)
    first = intake(engine, event("k1"), ROUTES)
    again = intake(engine, event("k1"), ROUTES)
    assert again == IntakeResult("duplicate", first.run_id,
                                 f"key 'k1' already started run {first.run_id}")
    assert len(runs_of(engine, "invoice", "acme")) == 1
    signalled = intake(engine, event("k2", type="invoice.paid"), ROUTES)
    assert signalled.action == "signalled"
    assert intake(engine, event("k2", type="invoice.paid"), ROUTES).action == "duplicate"
    assert [s.signal_id for s in engine.store.pending_signals("acme", str(first.run_id))] == [
        "k2"]


def test_the_same_event_delivered_concurrently_acts_once(backend: Backend) -> None:
    a, b = engine_on(backend, invoice), engine_on(backend, invoice)
    for i in range(ROUNDS):
        results = together(partial(intake, a, event(f"k{i}", f"INV-{i}"), ROUTES),
                           partial(intake, b, event(f"k{i}", f"INV-{i}"), ROUTES))
        assert sorted(r.action for r in results) == ["duplicate", "started"]
        assert results[0].run_id == results[1].run_id
    assert len(runs_of(a, "invoice", "acme")) == ROUNDS


def test_a_key_raced_for_two_entities_acts_once(backend: Backend) -> None:
    a, b = engine_on(backend, invoice), engine_on(backend, invoice)
    for i in range(ROUNDS):
        results = together(partial(intake, a, event(f"k{i}", f"A-{i}"), ROUTES),
                           partial(intake, b, event(f"k{i}", f"B-{i}"), ROUTES))
        assert sorted(r.action for r in results) == ["duplicate", "started"]
        owners = [a.store.entity_owner("acme", f"{x}-{i}") for x in "AB"]
        assert sorted(owners, key=str) == sorted([results[0].run_id, None], key=str)
    assert len(runs_of(a, "invoice", "acme")) == ROUNDS


def test_two_events_racing_for_a_new_entity_start_one_run(backend: Backend) -> None:
    a, b = engine_on(backend, invoice), engine_on(backend, invoice)
    for i in range(ROUNDS):
        results = together(partial(intake, a, event(f"x{i}", f"INV-{i}"), ROUTES),
                           partial(intake, b, event(f"y{i}", f"INV-{i}"), ROUTES))
        assert sorted(r.action for r in results) == ["signalled", "started"]
        assert results[0].run_id == results[1].run_id
        [signal] = a.store.pending_signals("acme", str(results[0].run_id))
        assert signal.name == "amended"
    assert len(runs_of(a, "invoice", "acme")) == ROUNDS


def test_an_event_for_an_owned_entity_reaches_the_owner_as_a_signal(backend: Backend) -> None:
    engine = engine_on(backend, invoice)
    runner = uw.Runner(engine)
    started = intake(engine, event("k1"), ROUTES)
    asyncio.run(runner.run_until_idle())
    paid = intake(engine, event("k2", type="invoice.paid", payload={"by": "card"}), ROUTES)
    assert (paid.action, paid.run_id) == ("signalled", started.run_id)
    state = asyncio.run(runner.run_until_complete(str(started.run_id), tenant_id="acme"))
    assert state.status == "completed"
    delivered = state.result["paid_by"]
    assert delivered["idempotency_key"] == "k2" and delivered["payload"] == {"by": "card"}
    assert delivered["permissions"] == ["invoices:read"] and delivered["source"] == "billing"


def test_after_the_owner_finished_the_next_event_starts_a_new_run(backend: Backend) -> None:
    engine = engine_on(backend, invoice)
    runner = uw.Runner(engine)
    first = intake(engine, event("k1"), ROUTES)
    intake(engine, event("k2", type="invoice.paid"), ROUTES)
    asyncio.run(runner.run_until_complete(str(first.run_id), tenant_id="acme"))
    assert engine.store.entity_owner("acme", "INV-1") is None
    late = intake(engine, event("k3", type="invoice.paid"), ROUTES)
    assert late.action == "ignored" and "no unfinished run owns entity 'INV-1'" in late.reason
    assert engine.store.get_intake("acme", "k3") is None
    second = intake(engine, event("k4"), ROUTES)
    assert second.action == "started" and second.run_id != first.run_id
    assert engine.store.entity_owner("acme", "INV-1") == second.run_id


def test_an_event_type_without_a_route_is_ignored(backend: Backend) -> None:
    engine = engine_on(backend, invoice)
    result = intake(engine, event("k1", type="invoice.voided"), ROUTES)
    assert result == IntakeResult(
        "ignored", None,
        "no route for event type 'invoice.voided' (routed types: invoice.created, invoice.paid)",
    )
    assert engine.store.get_intake("acme", "k1") is None
    assert runs_of(engine, "invoice", "acme") == []


def test_input_can_come_from_the_whole_event_or_a_function(backend: Backend) -> None:
    class Everything(BaseModel):
        entity_id: str
        permissions: list[str]

    audit: uw.Flow[Seen, Everything] = uw.Flow("audit", state=Seen, input=Everything)

    @audit.step(start=True)
    async def record(ctx: uw.RunContext[Seen, Everything]) -> Any:
        return ctx.done()

    engine = engine_on(backend)
    routes = {
        "a": StartFlow(audit, input_from="event"),
        "b": StartFlow(invoice, input_from=lambda e: {"number": e.entity_id.lower()}),
    }
    whole = intake(engine, event("k1", type="a"), routes)
    assert engine.state(str(whole.run_id), tenant_id="acme").input == {
        "entity_id": "INV-1", "permissions": ["invoices:read"]}
    derived = intake(engine, event("k2", "INV-2", type="b"), routes)
    assert engine.state(str(derived.run_id), tenant_id="acme").input == {
        "number": "inv-2", "amount": 0}


def test_bad_events_and_routes_are_refused_with_the_reason(backend: Backend) -> None:
    engine = engine_on(backend, invoice)
    with pytest.raises(IntakeError, match="occurred_at: Input should have timezone info"):
        intake(engine, event("k1", occurred_at="2024-01-01T10:00:00"), ROUTES)
    missing = event("k1")
    del missing["entity_id"]
    with pytest.raises(IntakeError, match="entity_id: Field required"):
        intake(engine, missing, ROUTES)
    with pytest.raises(IntakeError, match="idempotency_key: String should have at least 1"):
        intake(engine, event(""), ROUTES)
    with pytest.raises(IntakeError, match=r"event type 'invoice\.created': invalid input for flow"):
        intake(engine, event("k1", payload={"amount": "lots"}), ROUTES)
    broken = StartFlow(invoice, input_from=lambda e: {}["x"])
    with pytest.raises(IntakeError, match="input_from failed: KeyError"):
        intake(engine, event("k1"), {"invoice.created": broken})
    with pytest.raises(IntakeError, match="flow 'nope' is not registered"):
        intake(engine, event("k1"), {"invoice.created": StartFlow("nope")})
    with pytest.raises(IntakeError, match="reserved"):
        Signal("underway.cancel")
    with pytest.raises(IntakeError, match="route for 'x' must be StartFlow"):
        Routes({"x": "start it"})  # type: ignore[dict-item]
    assert engine.store.get_intake("acme", "k1") is None
    assert runs_of(engine, "invoice", "acme") == []


def test_an_event_is_frozen_and_normalized() -> None:
    ev = IntakeEvent.parse(event("k1", occurred_at=1_704_103_200))
    assert ev.occurred_at == datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert ev.permissions == ("invoices:read",)
    with pytest.raises(ValueError, match="frozen"):
        ev.entity_id = "other"  # type: ignore[misc]
