"""A worker's row check: how often it looks at every row is checked like how often it
looks at all, its window reaches a lease's ttl back, and a worker heals a row written
after its first look by a look at the rows written since."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.engine import Engine
from underway.errors import ConfigurationError
from underway.runner import Runner
from underway.store import RunUpdate
from underway.store.memory import MemoryStore
from underway.store.records import RowRepair
from underway.worker import ROW_FULL_CHECK_EVERY, Worker


@pytest.mark.parametrize("every", [0, -1.0, float("nan")])
def test_a_full_check_interval_that_is_no_positive_time_is_refused(every: float) -> None:
    engine = Engine(MemoryStore())
    with pytest.raises(ConfigurationError, match="row_full_check_every must be positive"):
        Worker(engine, row_full_check_every=every)
    with pytest.raises(ConfigurationError, match="row_check_every must be positive"):
        Worker(engine, row_check_every=every)


def test_a_worker_checks_every_row_once_a_day_by_default() -> None:
    engine = Engine(MemoryStore(), lease_ttl=45)
    worker = Worker(engine)
    assert worker.row_check.full_every == ROW_FULL_CHECK_EVERY == 86400
    assert worker.row_check.margin == 45
    assert Worker(engine, row_full_check_every=60).row_check.full_every == 60


def test_a_worker_heals_a_row_written_after_its_first_look_without_a_full_one() -> None:
    class S(BaseModel):
        n: int = 0

    flow = uw.Flow("rowcheck-worker-sleeper", state=S)

    @flow.step
    async def first(ctx: Any) -> Any:
        return ctx.sleep(3600, then="end")

    @flow.step
    async def end(ctx: Any) -> Any:
        return ctx.done("woke")

    store = MemoryStore()
    engine = Engine(store, flows=[flow])
    early, late = (engine.start(flow)[0] for _ in range(2))
    asyncio.run(Runner(engine).run_until_idle())

    def finish(run_id: str) -> None:
        row = store.get_run("default", run_id)
        assert row is not None and row.status == "waiting"
        assert store.repair_run(RowRepair("default", run_id, row, row.last_seq, row.last_hash,
                                          RunUpdate("completed", None, None)),
                                now=engine.clock.now())

    async def until(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        finish(early)
        worker = Worker(engine, row_check_every=0.05, poll=0.05)
        serving = asyncio.create_task(worker.run())
        try:
            await until(lambda: worker.rows_healed == 1, "the first look")
            assert worker.row_check.full_looks == 1
            finish(late)
            await until(lambda: worker.rows_healed == 2, "a look at the rows written since")
            assert worker.row_check.full_looks == 1
        finally:
            worker.stop()
            await serving

    asyncio.run(scenario())
    assert [engine.state(r).status for r in (early, late)] == ["waiting", "waiting"]
