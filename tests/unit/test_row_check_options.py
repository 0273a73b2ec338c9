"""A worker's row check: how often it looks at every row is checked like how often it
looks at all, and the worker's look window starts a lease's ttl back."""

from __future__ import annotations

import pytest

from underway.engine import Engine
from underway.errors import ConfigurationError
from underway.store.memory import MemoryStore
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
