"""The server's grouped writes (:mod:`underway.service._batch`) share the engine's group
commit queue: entries that arrive together are one transaction, and a request that went
away before its group was written has nothing written (its answer was never sent)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from underway.service._batch import Writes
from underway.store import Store, connect
from underway.store.base import AccessRecord

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    s = connect(url)
    s.migrate()
    yield s
    s.close()


def _read(run_id: str) -> list[AccessRecord]:
    return [AccessRecord("t", 1_000.0, "k1", "key", run_id, "GET /v1/runs/{run_id}")]


def test_a_request_gone_before_its_group_is_written_has_no_entry(store: Store) -> None:
    writes = Writes(store)

    async def scenario() -> list[Any]:
        tasks = [asyncio.create_task(writes.log_access(_read(f"r{i}"))) for i in range(3)]
        await asyncio.sleep(0)  # every task has queued its entry; none is written yet
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(scenario())
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], asyncio.CancelledError)
    assert sorted(a.run_id for a in store.list_access("t")) == ["r0", "r2"]
    assert (writes.access.groups, writes.access.items) == (1, 2)
