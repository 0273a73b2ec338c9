"""Suspect runs rows on every backend (``LeaseStore.suspect_runs``): with ``since`` only the
rows written at or after it are checked, every kind of suspect is found either way, and a
worker's looks (``RowCheck``) heal a row written since the last look, leave an older one to
the look that checks every row, and do not lose suspects past ``limit``."""

from __future__ import annotations

import asyncio
from typing import Any

from builders import T0, create
from pydantic import BaseModel

import underway as uw
from underway.clock import ManualClock
from underway.engine import Engine
from underway.engine._rows import RowCheck
from underway.runner import Runner
from underway.store import RunUpdate, Store
from underway.store.leases import MAX_LEASE_TTL
from underway.store.records import RowRepair

FINISHED = RunUpdate("completed", None, None)
NO_WAKE = RunUpdate("ready", "start", None)


def forge(store: Store, run_id: str, update: RunUpdate, *, at: float,
          tenant: str = "t1") -> None:
    """Write a row the journal contradicts, as of ``at`` (its ``updated_at``)."""
    row = store.get_run(tenant, run_id)
    assert row is not None
    assert store.repair_run(RowRepair(tenant, run_id, row, row.last_seq, row.last_hash,
                                      update), now=at)


def test_since_checks_only_the_rows_written_at_or_after_it(store: Store) -> None:
    for run_id in ("r1", "r2", "r3", "r4"):
        create(store, run_id)
    forge(store, "r1", FINISHED, at=T0 + 10)
    forge(store, "r2", FINISHED, at=T0 + 100)
    forge(store, "r3", NO_WAKE, at=T0 + 100)
    now = T0 + 200
    assert store.suspect_runs(now=now) == [("t1", "r1"), ("t1", "r2"), ("t1", "r3")]
    assert store.suspect_runs(now=now, since=T0 + 50) == [("t1", "r2"), ("t1", "r3")]
    assert store.suspect_runs(now=now, since=T0 + 100) == [("t1", "r2"), ("t1", "r3")]
    assert store.suspect_runs(now=now, since=T0 + 100.5) == []
    assert store.suspect_runs(now=now, since=T0 + 50, limit=1) == [("t1", "r2")]
    assert store.suspect_runs(now=now, since=T0 - 1) == store.suspect_runs(now=now)


def test_every_kind_of_suspect_is_found_with_since(store: Store) -> None:
    for run_id in ("fin", "nowake", "ghost", "fine"):
        create(store, run_id, wake=T0 + 5)
    forge(store, "fin", FINISHED, at=T0 + 1)
    forge(store, "nowake", NO_WAKE, at=T0 + 1)
    store.claim(owner="ghost", now=T0 + 5, ttl=10 * MAX_LEASE_TTL, tenant_id="t1",
                run_id="ghost")
    create(store, "other", tenant="t2")
    forge(store, "other", FINISHED, at=T0 + 1, tenant="t2")
    want = [("t1", "fin"), ("t1", "ghost"), ("t1", "nowake"), ("t2", "other")]
    assert store.suspect_runs(now=T0 + 6) == want
    assert store.suspect_runs(now=T0 + 6, since=T0) == want
    # A ready row with a wake time and no lease is no suspect.
    assert ("t1", "fine") not in store.suspect_runs(now=T0 + 6, since=T0)


class S(BaseModel):
    n: int = 0


def _sleeper() -> uw.Flow[Any, Any]:
    flow = uw.Flow("rowcheck-sleeper", state=S)

    @flow.step
    async def first(ctx: Any) -> Any:
        return ctx.sleep(3600, then="end")

    @flow.step
    async def end(ctx: Any) -> Any:
        return ctx.done("woke")

    return flow


def _sleeping(store: Store, n: int) -> tuple[Engine, ManualClock, list[str]]:
    clock = ManualClock()
    flow = _sleeper()
    engine = Engine(store, flows=[flow], clock=clock)
    runs = [engine.start(flow)[0] for _ in range(n)]
    asyncio.run(Runner(engine).run_until_idle())
    for run_id in runs:
        row = store.get_run("default", run_id)
        assert row is not None and row.status == "waiting", row
    return engine, clock, runs


def _finish(store: Store, run_id: str, at: float) -> None:
    forge(store, run_id, FINISHED, at=at, tenant="default")


def _status(store: Store, run_id: str) -> str:
    row = store.get_run("default", run_id)
    assert row is not None
    return row.status


def test_looks_heal_new_rows_and_the_full_look_finds_old_ones(store: Store) -> None:
    engine, clock, (early, late, old) = _sleeping(store, 3)
    check = RowCheck(margin=30, full_every=20_000)
    svc, unhealed = engine.services, engine.unhealed
    _finish(store, early, clock.now())
    assert check.look(svc, unhealed) == 1 and check.full_looks == 1  # the first is full
    assert _status(store, early) == "waiting"
    start = clock.now()
    clock.advance(300)
    # Written after the first look: the next look, which reads only such rows, heals it.
    _finish(store, late, clock.now())
    assert check.since is not None and check.since <= start
    assert check.look(svc, unhealed) == 1 and check.full_looks == 1
    assert _status(store, late) == "waiting"
    # Changed without a new write time: only a look at every row finds it.
    _finish(store, old, start - 3 * MAX_LEASE_TTL)
    clock.advance(300)
    assert check.look(svc, unhealed) == 0 and check.full_looks == 1
    assert _status(store, old) == "completed"
    clock.advance(20_000)
    assert check.look(svc, unhealed) == 1 and check.full_looks == 2
    assert _status(store, old) == "waiting"


def test_a_look_that_finds_limit_suspects_leaves_none_behind(store: Store) -> None:
    engine, clock, runs = _sleeping(store, 3)
    check = RowCheck(margin=30, full_every=100_000)
    svc, unhealed = engine.services, engine.unhealed
    assert check.look(svc, unhealed, limit=2) == 0
    written = clock.now() + 1
    for run_id in runs:
        _finish(store, run_id, written)
    clock.advance(2 * MAX_LEASE_TTL)  # a cursor moved to this look would skip one
    assert check.look(svc, unhealed, limit=2) == 2
    assert check.since is not None and check.since <= written
    assert check.look(svc, unhealed, limit=2) == 1
    assert [_status(store, r) for r in runs] == ["waiting"] * 3
    assert check.since is not None and check.since > written


def test_a_row_that_turns_suspect_when_its_lease_runs_out_is_healed(store: Store) -> None:
    engine, clock, (run_id,) = _sleeping(store, 1)
    check = RowCheck(margin=30, full_every=100_000)
    svc, unhealed = engine.services, engine.unhealed
    assert check.look(svc, unhealed) == 0
    clock.advance(3600)  # the run is due; a worker takes it and dies after one write
    [lease] = store.claim(owner="dead-worker", now=clock.now(), ttl=MAX_LEASE_TTL,
                          run_id=run_id, tenant_id="default")
    forge(store, run_id, NO_WAKE, at=clock.now(), tenant="default")
    clock.advance(60)
    assert check.look(svc, unhealed) == 0  # a live lease: its holder writes the row
    clock.advance(MAX_LEASE_TTL)  # the lease ran out with the row as it was written
    assert lease.expires_at < clock.now()
    assert store.suspect_runs(now=clock.now()) == [("default", run_id)]
    assert check.look(svc, unhealed) == 1 and check.full_looks == 1
    assert _status(store, run_id) == "waiting"
