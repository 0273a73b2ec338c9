"""PostgreSQL pipelines raise a refusal once and close quietly. psycopg raises a
statement's error where its answer arrives: on a slow or paused client, inside the
pipeline, before the last statement is queued. Closing the pipeline then failed again,
and psycopg logged ``error ignored terminating <psycopg.Pipeline>`` at every refusal of
a fenced worker."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import pytest
from builders import batch
from test_append_many import leased

from underway import connect
from underway.errors import FencedError

pytestmark = pytest.mark.postgres

NOISE = "error ignored terminating"


@pytest.fixture
def slow_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client slow enough that each statement's answer is back before it queues the
    next one, as on a busy or paused worker."""
    execute = psycopg.Connection.execute

    def slow(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        cursor = execute(self, *args, **kwargs)
        if self._pipeline is not None:
            deadline = time.monotonic() + 0.05
            while time.monotonic() < deadline:  # the server answers meanwhile
                pass
        return cursor

    monkeypatch.setattr(psycopg.Connection, "execute", slow)


def test_a_refused_append_is_raised_once_without_pipeline_noise(
    pg_url: str, slow_client: None, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="psycopg")
    store = connect(pg_url)
    try:
        first, second = leased(store, "r1", "r2")
        stale = batch(first, 1, fence=first.token + 7, blobs={"k": b"x"},
                      checkpoint=(3, b"s"))
        with pytest.raises(FencedError, match=r"lease token \d+ is stale"):
            store.append(stale)
        results = store.append_many([stale, batch(second, 1)])
        assert isinstance(results[0], FencedError) and results[1] is False
    finally:
        store.close()
    assert [r.getMessage() for r in caplog.records if NOISE in r.getMessage()] == []
