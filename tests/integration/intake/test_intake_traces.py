"""Queue intake starts each run in a trace, on SQLite and PostgreSQL, against the real
RabbitMQ broker: a message with a W3C ``traceparent`` header starts its run in the
sender's trace; a message without one (as most queue messages come) starts a run with a
trace context of its own, minted and journaled."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.intake_world import (
    QUICK,
    TENANT,
    ConsumerThread,
    RabbitQueue,
    open_store,
    order,
    routes,
    wait_until,
)
from underway import Client
from underway import events as ev
from underway.lineage import root_span_id, trace_parent
from underway.scheduling.intake_sources import RabbitMQIntake
from underway.store.base import Store

SENDER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


def test_a_queued_event_starts_its_run_in_a_trace_with_or_without_a_traceparent(
    store: Store, rabbit_queue: RabbitQueue
) -> None:
    rabbit_queue.publish([("with", order("o1", "placed", sku="A"))],
                         headers={"traceparent": SENDER, "tracestate": "vendor=1"})
    rabbit_queue.publish([("without", order("o2", "placed", sku="B"))])
    consumer = ConsumerThread(RabbitMQIntake(
        Client(store), routes, queue=rabbit_queue.name, url=rabbit_queue.url,
        dead_letter=rabbit_queue.dead, tenant_id=TENANT, backoff=QUICK))
    try:
        wait_until(lambda: consumer.counts.acted >= 2, "both messages to be acted on")
    finally:
        consumer.close()

    client = Client(store)
    contexts = {}
    for key in ("with", "without"):
        record = store.get_intake(TENANT, key)
        assert record is not None and record.run_id is not None
        first = client.history(record.run_id, tenant_id=TENANT)[0].event
        assert isinstance(first, ev.RunStarted)
        contexts[key] = (record.run_id, first.trace_context)
    assert contexts["with"][1] == {"traceparent": SENDER, "tracestate": "vendor=1"}
    run_id, minted = contexts["without"]
    found = trace_parent(minted)
    assert found is not None and found[1] == root_span_id(run_id)
    assert found[0] != SENDER.split("-")[1]
