"""Fixtures of the queue and mail intake tests: a fresh stream or queue per test on the
real brokers, removed afterwards."""

from __future__ import annotations

import pytest

from fakes import intake_world

nats_stream = intake_world.nats_stream
rabbit_queue = intake_world.rabbit_queue


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh database of each backend."""
    return str(request.getfixturevalue("pg_url" if request.param == "postgres"
                                       else "sqlite_url"))
