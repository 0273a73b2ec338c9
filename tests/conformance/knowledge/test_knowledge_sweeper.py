"""The sweeper erases knowledge whose retention ran out, beside a worker's loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

import underway as uw
from underway.errors import ConfigurationError
from underway.knowledge import (
    KnowledgeBase,
    KnowledgeRecord,
    KnowledgeSweeper,
    open_knowledge,
    sweep,
)
from underway.store import connect

T0 = 1_700_000_000.0
HOUR = 3600.0


def rec(id: str, expires_at: float | None) -> KnowledgeRecord:
    return KnowledgeRecord(id=id, tenant_id="acme", text=f"note {id}", source="system",
                           created_at=T0, expires_at=expires_at)


def test_sweep_erases_what_expired_by_the_clocks_time(knowledge: KnowledgeBase) -> None:
    knowledge.put(rec("soon", T0 + HOUR))
    knowledge.put(rec("later", T0 + 5 * HOUR))
    clock = uw.ManualClock(T0 + 2 * HOUR)
    assert sweep(knowledge, clock) == 1
    assert knowledge.get("acme", "soon") is None
    assert knowledge.get("acme", "later") is not None


def test_a_running_sweeper_purges_at_each_pass_until_stopped() -> None:
    knowledge = open_knowledge("memory://")
    knowledge.put(rec("half-hour", T0 + HOUR / 2))
    knowledge.put(rec("ten-days", T0 + 240 * HOUR))
    knowledge.put(rec("forever", None))
    clock = uw.ManualClock(T0)  # jumps ahead to each time the sweeper waits for
    sweeper = KnowledgeSweeper(knowledge, clock=clock, every=HOUR)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(sweeper.run(stop))
        while sweeper.passes < 2:
            await asyncio.sleep(0)
        stop.set()
        await task

    asyncio.run(scenario())
    assert sweeper.purged == 1
    assert knowledge.get("acme", "half-hour") is None
    assert knowledge.get("acme", "ten-days") is not None
    assert knowledge.get("acme", "forever") is not None


def test_a_failing_sweep_is_logged_and_tried_again(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = connect(sqlite_url)
    sweeper = KnowledgeSweeper(open_knowledge(store), clock=uw.ManualClock(T0), every=HOUR)
    store.close()  # every pass now fails

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(sweeper.run(stop))
        while len(caplog.records) < 2:
            await asyncio.sleep(0)
        stop.set()
        await task

    with caplog.at_level(logging.ERROR, logger="underway.knowledge"):
        asyncio.run(scenario())
    assert sweeper.passes == 0
    assert "knowledge sweep failed" in caplog.records[0].getMessage()


@pytest.mark.parametrize("every", [0, -1.0])
def test_a_sweeper_needs_a_positive_interval(every: float) -> None:
    with pytest.raises(ConfigurationError, match="interval"):
        KnowledgeSweeper(open_knowledge("memory://"), every=every)
