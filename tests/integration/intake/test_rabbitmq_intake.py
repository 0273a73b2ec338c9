"""Intake from RabbitMQ, against the real broker: each malformed kind dead-lettered with
its reason without blocking the messages after it, a key delivered twice acting once, a
store failure requeueing the message (delivered again, then acted on once, never
dead-lettered), and ``underway intake rabbitmq`` stopping cleanly on SIGINT."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from fakes.intake_world import (
    MALFORMED,
    QUICK,
    TENANT,
    ConsumerThread,
    IntakeProcess,
    RabbitQueue,
    Sent,
    block_intake,
    check_once,
    open_store,
    order,
    routes,
    stored,
    unblock_intake,
    wait_until,
)
from underway import Client
from underway.errors import ConfigurationError
from underway.scheduling.intake_sources import REASON_HEADER, RabbitMQIntake
from underway.store.base import Store


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = open_store(sqlite_url)
    yield s
    s.close()


def consume(store: Store, q: RabbitQueue, **options: Any) -> ConsumerThread:
    return ConsumerThread(RabbitMQIntake(
        Client(store), routes, queue=q.name, url=q.url, dead_letter=q.dead,
        tenant_id=TENANT, backoff=QUICK, **options))


def settle(consumer: ConsumerThread, q: RabbitQueue, messages: int) -> None:
    """Wait until ``messages`` were acted on or dead-lettered, stop the consumer, and
    check that the broker holds none of them any more (an unacknowledged one would be
    back in the queue once its consumer is gone)."""
    try:
        wait_until(lambda: consumer.counts.acted + consumer.counts.dead >= messages,
                   f"{messages} messages to be settled")
    finally:
        consumer.close()
    assert q.ready() == 0


def test_each_malformed_kind_is_dead_lettered_and_blocks_nothing(
    store: Store, rabbit_queue: RabbitQueue
) -> None:
    messages: list[tuple[str | None, bytes | dict[str, Any]]] = [
        ("placed", order("o1", "placed", sku="A"))]
    for i, (msg_id, body, _) in enumerate(MALFORMED):
        messages += [(msg_id, body), (f"changed-{i}", order("o1", "changed", quantity=i))]
    rabbit_queue.publish(messages, headers={"x-trace": "kept"})
    consumer = consume(store, rabbit_queue)
    settle(consumer, rabbit_queue, len(messages))

    assert (consumer.counts.acted, consumer.counts.dead) == (1 + len(MALFORMED), len(MALFORMED))
    check_once(store, [Sent("placed", "o1", "placed"),
                       *(Sent(f"changed-{i}", "o1", "changed") for i in range(len(MALFORMED)))])
    letters = rabbit_queue.dead_letters()
    assert len(letters) == len(MALFORMED)
    for (headers, letter), (msg_id, body, says) in zip(letters, MALFORMED, strict=True):
        assert says in headers[REASON_HEADER], headers
        assert headers["x-trace"] == "kept"
        assert says in letter["reason"] and letter["message_id"] == msg_id
        assert letter["source"] == f"rabbitmq:{rabbit_queue.name}"
        if isinstance(body, bytes):
            assert letter["body"].encode() == body
    for entity in ("o2", "o3", "o4", "o5", "o6"):
        assert store.entity_owner(TENANT, entity) is None


def test_a_key_delivered_twice_acts_once(store: Store, rabbit_queue: RabbitQueue) -> None:
    rabbit_queue.publish([
        ("first", order("o1", "placed")),
        ("again", {**order("o1", "changed", quantity=2), "idempotency_key": "chg"}),
        ("again-2", {**order("o1", "changed", quantity=2), "idempotency_key": "chg"}),
        ("first", order("o1", "placed")),  # the same message id published twice
    ])
    consumer = consume(store, rabbit_queue)
    settle(consumer, rabbit_queue, 4)
    assert (consumer.counts.acted, consumer.counts.duplicates, consumer.counts.dead) == (4, 2, 0)
    check_once(store, [Sent("first", "o1", "placed"), Sent("chg", "o1", "changed")])


def test_a_store_failure_requeues_the_message_and_it_acts_once(
    store_url: str, rabbit_queue: RabbitQueue
) -> None:
    with stored(store_url) as s:
        block_intake(store_url)
        rabbit_queue.publish([("placed", order("o1", "placed")),
                              ("changed", order("o1", "changed", quantity=1))])
        consumer = consume(s, rabbit_queue)
        try:
            wait_until(lambda: consumer.counts.retried >= 3, "the message to be requeued")
            assert consumer.counts.acted == 0 and s.get_intake(TENANT, "placed") is None
            unblock_intake(store_url)
        finally:
            settle(consumer, rabbit_queue, 2)
        assert (consumer.counts.acted, consumer.counts.dead) == (2, 0)
        assert rabbit_queue.dead_letters() == []
        check_once(s, [Sent("placed", "o1", "placed"), Sent("changed", "o1", "changed")])


def test_configuration_errors_name_the_problem(store: Store, rabbit_queue: RabbitQueue) -> None:
    client = Client(store)
    with pytest.raises(ConfigurationError, match="a dead letter would be read again"):
        RabbitMQIntake(client, routes, queue=rabbit_queue.name, dead_letter=rabbit_queue.name)
    with pytest.raises(ConfigurationError, match="RabbitMQ has no queue 'nope-"):
        ConsumerThread(RabbitMQIntake(client, routes, queue=f"nope-{rabbit_queue.name}",
                                      url=rabbit_queue.url))


def test_the_command_acts_then_stops_cleanly_on_sigint(
    sqlite_url: str, rabbit_queue: RabbitQueue
) -> None:
    open_store(sqlite_url).close()
    proc = IntakeProcess("rabbitmq", "--queue", rabbit_queue.name, "--url", rabbit_queue.url,
                         "--dead-letter", rabbit_queue.dead, "--db", sqlite_url)
    try:
        proc.expect_err("ready")
        rabbit_queue.publish([("p", order("o1", "placed")), ("bad", b"[1, 2")])
        proc.expect_err("key 'p': started run")
        proc.expect_err("dead-lettered")
        summary = proc.stop(signal.SIGINT)
    finally:
        proc.close()
    assert "1 acted on (0 duplicates), 1 dead-lettered, 0 handed back" in summary
    assert rabbit_queue.ready() == 0 and len(rabbit_queue.dead_letters()) == 1
    with stored(sqlite_url) as s:
        check_once(s, [Sent("p", "o1", "placed")])
