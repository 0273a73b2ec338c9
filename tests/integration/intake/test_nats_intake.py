"""Intake from NATS JetStream, against the real server: each malformed kind dead-lettered
with its reason without blocking the messages after it, a key delivered twice acting once,
a store failure handing the message back (redelivered, then acted on once, never
dead-lettered), and ``underway intake nats`` stopping cleanly on SIGTERM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakes.intake_world import (
    MALFORMED,
    QUICK,
    TENANT,
    ConsumerThread,
    IntakeProcess,
    NatsStream,
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
from underway.scheduling.intake_sources import REASON_HEADER, NatsIntake
from underway.store.base import Store


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = open_store(sqlite_url)
    yield s
    s.close()


def consume(store: Store, stream: NatsStream, **options: Any) -> ConsumerThread:
    return ConsumerThread(NatsIntake(
        Client(store), routes, stream=stream.name, subject=stream.subject,
        servers=stream.url, dead_letter=stream.dead, tenant_id=TENANT, ack_wait=2.0,
        backoff=QUICK, **options))


def test_each_malformed_kind_is_dead_lettered_and_blocks_nothing(
    store: Store, nats_stream: NatsStream
) -> None:
    # A good message before, between and after every malformed one.
    messages: list[tuple[str | None, bytes | dict[str, Any]]] = [
        ("placed", order("o1", "placed", sku="A"))]
    for i, (msg_id, body, _) in enumerate(MALFORMED):
        messages += [(msg_id, body), (f"changed-{i}", order("o1", "changed", quantity=i))]
    nats_stream.publish(messages)
    consumer = consume(store, nats_stream)
    try:
        wait_until(lambda: nats_stream.settled(), "every message to be settled")
    finally:
        consumer.close()

    assert consumer.counts.dead == len(MALFORMED)
    assert consumer.counts.acted == 1 + len(MALFORMED)
    check_once(store, [Sent("placed", "o1", "placed"),
                       *(Sent(f"changed-{i}", "o1", "changed") for i in range(len(MALFORMED)))])
    letters = nats_stream.dead_letters()
    assert len(letters) == len(MALFORMED)
    for (headers, letter), (msg_id, body, says) in zip(letters, MALFORMED, strict=True):
        assert says in headers[REASON_HEADER], headers
        assert says in letter["reason"]
        assert letter["message_id"] == msg_id
        assert letter["headers"]["Nats-Msg-Id"] == msg_id
        assert letter["source"] == f"nats:{nats_stream.name}"
        sent = body if isinstance(body, bytes) else None
        if sent is not None:
            assert letter["body"].encode() == sent
    # Nothing was started for an entity of a malformed message.
    for entity in ("o2", "o3", "o4", "o5", "o6"):
        assert store.entity_owner(TENANT, entity) is None


def test_a_key_delivered_twice_acts_once(store: Store, nats_stream: NatsStream) -> None:
    seqs = nats_stream.publish([
        ("first", order("o1", "placed")),
        # The same event again under another message id: the body's key decides.
        ("again", {**order("o1", "changed", quantity=2), "idempotency_key": "chg"}),
        ("again-2", {**order("o1", "changed", quantity=2), "idempotency_key": "chg"}),
        # No message id: the key is the stream and its sequence.
        (None, order("o1", "changed", quantity=3)),
    ])
    consumer = consume(store, nats_stream)
    try:
        wait_until(lambda: nats_stream.settled(), "every message to be settled")
    finally:
        consumer.close()
    assert (consumer.counts.acted, consumer.counts.duplicates, consumer.counts.dead) == (4, 1, 0)
    check_once(store, [Sent("first", "o1", "placed"), Sent("chg", "o1", "changed"),
                       Sent(f"nats:{nats_stream.name}:{seqs[3]}", "o1", "changed")])


def test_a_store_failure_hands_the_message_back_and_it_acts_once(
    store_url: str, nats_stream: NatsStream
) -> None:
    with stored(store_url) as s:
        block_intake(store_url)
        nats_stream.publish([("placed", order("o1", "placed")),
                             ("changed", order("o1", "changed", quantity=1))])
        consumer = consume(s, nats_stream)
        try:
            # Handed back (NAK with a delay) and delivered again, more than once.
            wait_until(lambda: consumer.counts.retried >= 3, "the message to be handed back")
            assert consumer.counts.acted == 0 and s.get_intake(TENANT, "placed") is None
            unblock_intake(store_url)
            wait_until(lambda: nats_stream.settled(), "every message to be settled")
        finally:
            consumer.close()
        assert (consumer.counts.acted, consumer.counts.dead) == (2, 0)
        assert nats_stream.dead_letters() == []
        check_once(s, [Sent("placed", "o1", "placed"), Sent("changed", "o1", "changed")])


def test_configuration_errors_name_the_problem(store: Store, nats_stream: NatsStream) -> None:
    client = Client(store)
    with pytest.raises(ConfigurationError, match="a dead letter would be read again"):
        NatsIntake(client, routes, stream=nats_stream.name, subject=f"{nats_stream.name}.>",
                   dead_letter=nats_stream.dead)
    with pytest.raises(ConfigurationError, match="NATS has no stream 'nope"):
        ConsumerThread(NatsIntake(client, routes, stream=f"nope{nats_stream.name}",
                                  subject="x", servers=nats_stream.url))
    with pytest.raises(ConfigurationError, match="no stream captures the dead-letter subject"):
        ConsumerThread(NatsIntake(client, routes, stream=nats_stream.name,
                                  subject=nats_stream.subject, servers=nats_stream.url,
                                  dead_letter="nowhere.dead"))


def test_the_command_acts_then_stops_cleanly_on_sigterm(
    sqlite_url: str, nats_stream: NatsStream
) -> None:
    open_store(sqlite_url).close()
    proc = IntakeProcess("nats", "--stream", nats_stream.name, "--subject",
                         nats_stream.subject, "--server", nats_stream.url, "--dead-letter",
                         nats_stream.dead, "--db", sqlite_url)
    try:
        proc.expect_err("ready")
        nats_stream.publish([("p", order("o1", "placed")), ("bad", b"[1, 2")])
        wait_until(lambda: nats_stream.settled(), "both messages to be settled")
        summary = proc.stop()
    finally:
        proc.close()
    assert "1 acted on (0 duplicates), 1 dead-lettered, 0 handed back" in summary
    with stored(sqlite_url) as s:
        check_once(s, [Sent("p", "o1", "placed")])


def test_the_command_refuses_a_missing_stream(sqlite_url: str, nats_url: str) -> None:
    open_store(sqlite_url).close()
    proc = IntakeProcess("nats", "--stream", "no-such-stream", "--subject", "x",
                         "--server", nats_url, "--db", sqlite_url)
    try:
        assert proc.wait() == 2
        assert "NATS has no stream 'no-such-stream'" in proc.stderr()
    finally:
        proc.close()
