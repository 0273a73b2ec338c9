"""Fixtures of the queue and mail intake tests: a fresh stream or queue per test on the
real brokers, removed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.intake_world import NatsStream, RabbitQueue


@pytest.fixture
def nats_stream(nats_url: str) -> Iterator[NatsStream]:
    """A fresh JetStream stream and its dead-letter stream."""
    stream = NatsStream(nats_url)
    stream.create()
    yield stream
    stream.delete()


@pytest.fixture
def rabbit_queue(amqp_url: str) -> Iterator[RabbitQueue]:
    """A fresh RabbitMQ queue (and, once used, its dead-letter queue)."""
    q = RabbitQueue(amqp_url)
    q.create()
    yield q
    q.delete()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh database of each backend."""
    return str(request.getfixturevalue("pg_url" if request.param == "postgres"
                                       else "sqlite_url"))
