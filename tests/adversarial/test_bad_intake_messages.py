"""Bad input from a queue or a maildir never stores anything and never loops: a message
whose fields a database cannot hold (a NUL, a lone surrogate), that are not JSON
(NaN, infinities, 1e309) or that nest too deep is refused naming the field, settled once
as the source settles a malformed message (a dead letter, the ``.dead`` folder), and the
good message after it still starts its run. Input that does not fit its flow's input
model is refused at the door the same way, with the words the webhook's 422 uses, and
no run is created. Attacked on real NATS JetStream and
RabbitMQ brokers and a maildir, over SQLite and a real PostgreSQL (where a NUL in a key
once failed the driver, and the message was handed back forever)."""

from __future__ import annotations

import json
import mailbox
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import intake_world
from fakes.intake_world import (
    QUICK,
    TENANT,
    ConsumerThread,
    NatsStream,
    RabbitQueue,
    open_store,
    order,
    routes,
    rows_digest,
    wait_until,
)
from underway import Client
from underway.inputs import MAX_DEPTH, MAX_NAME
from underway.scheduling.intake_sources import (
    MaildirIntake,
    MailOptions,
    NatsIntake,
    RabbitMQIntake,
)
from underway.store.base import Store


def _body(entity: str, **fields: Any) -> bytes:
    return json.dumps({**order(entity, "placed"), **fields}).encode()


def _raw(entity: str, tail: str) -> bytes:
    """A body written by hand: ``tail`` is JSON text no encoder writes."""
    return f'{{"entity_id": "{entity}", "event_type": "order.placed", {tail}}}'.encode()


DEEP = "[" * (MAX_DEPTH + 10) + "]" * (MAX_DEPTH + 10)
LONG = "k" * (MAX_NAME + 1)

WITNESSES: list[tuple[str, bytes, str]] = [
    ("nul-entity", _body("e1\x00x"), "entity_id"),
    ("nul-type", _body("e2", event_type="order.placed\x00"), "event_type"),
    ("nul-key", _body("e3", idempotency_key="k\x00"), "idempotency_key"),
    ("nul-payload", _body("e4", payload={"note": "a\x00b"}), "payload.note"),
    ("nul-permission", _body("e5", permissions=["read\x00"]), "permissions"),
    ("surrogate-entity", _body("e6\ud800"), "entity_id"),
    ("surrogate-key", _body("e7", idempotency_key="k\udfff"), "idempotency_key"),
    ("nan", _raw("e8", '"payload": {"amount": NaN}'), "payload.amount"),
    ("infinity", _raw("e9", '"payload": [1, -Infinity]'), "payload.1"),
    ("huge", _raw("e10", '"payload": {"x": 1e309}'), "payload.x"),
    ("nan-time", _raw("e11", '"occurred_at": NaN'), "occurred_at"),
    ("huge-time", _raw("e12", '"occurred_at": 1e309'), "occurred_at"),
    ("deep", _raw("e13", f'"payload": {DEEP}'), "payload"),
    ("long-key", _body("e14", payload={LONG: 1}), "payload.kkk"),
    ("long-id", _body("e15", idempotency_key=LONG), "idempotency_key"),
]
"""(message id, body, the field its refusal names) of each bad message."""
ENTITIES = [f"e{i}" for i in range(1, 16)]
GOOD = ("good", json.dumps(order("fine", "placed")).encode())


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    yield s
    s.close()


# The brokers' fixtures, shared with tests/integration/intake.
nats_stream = intake_world.nats_stream
rabbit_queue = intake_world.rabbit_queue


def nothing_for_the_bad(store: Store) -> None:
    """No bad message left a key, an entity's owner or a run behind."""
    for msg_id, _, _ in WITNESSES:
        assert store.get_intake(TENANT, msg_id) is None, msg_id
    for entity in ENTITIES:
        assert store.entity_owner(TENANT, entity) is None, entity


def the_good_one_started(store: Store) -> None:
    record = store.get_intake(TENANT, "good")
    assert record is not None and record.action == "started", record
    assert [r.run_id for r in store.list_runs(TENANT, limit=100)] == [record.run_id]


def refusals_name_their_fields(letters: list[tuple[dict[str, str], dict[str, Any]]]) -> None:
    assert len(letters) == len(WITNESSES), [letter["reason"] for _, letter in letters]
    for (_, letter), (msg_id, _, field) in zip(letters, WITNESSES, strict=True):
        assert letter["message_id"] == msg_id, letter
        assert field in letter["reason"], (msg_id, letter["reason"])


def attack(store: Store, db_url: str, consumer: ConsumerThread,
           publish: Any, settled: Any) -> None:
    """Publish every witness, wait until each is settled once, check nothing was stored;
    then a good message starts its run."""
    before = rows_digest(db_url)
    try:
        publish([(msg_id, body) for msg_id, body, _ in WITNESSES])
        # A message handed back would be counted as retried and never as dead.
        counts = consumer.counts
        wait_until(lambda: counts.retried > 0 or counts.dead + counts.acted >= len(WITNESSES),
                   "every bad message to be settled")
        assert (consumer.counts.dead, consumer.counts.retried, consumer.counts.acted) == (
            len(WITNESSES), 0, 0)
        assert rows_digest(db_url) == before
        publish([GOOD])
        wait_until(lambda: consumer.counts.acted == 1 and settled(),
                   "the good message to be acted on")
    finally:
        consumer.close()
    assert (consumer.counts.dead, consumer.counts.retried) == (len(WITNESSES), 0)
    nothing_for_the_bad(store)
    the_good_one_started(store)


def test_nats_refuses_each_bad_field_once(store: Store, db_url: str,
                                          nats_stream: NatsStream) -> None:
    consumer = ConsumerThread(NatsIntake(
        Client(store), routes, stream=nats_stream.name, subject=nats_stream.subject,
        servers=nats_stream.url, dead_letter=nats_stream.dead, tenant_id=TENANT,
        ack_wait=2.0, backoff=QUICK))
    attack(store, db_url, consumer, nats_stream.publish, nats_stream.settled)
    refusals_name_their_fields(nats_stream.dead_letters())


def test_rabbitmq_refuses_each_bad_field_once(store: Store, db_url: str,
                                              rabbit_queue: RabbitQueue) -> None:
    consumer = ConsumerThread(RabbitMQIntake(
        Client(store), routes, queue=rabbit_queue.name, url=rabbit_queue.url,
        dead_letter=rabbit_queue.dead, tenant_id=TENANT, backoff=QUICK))
    attack(store, db_url, consumer, rabbit_queue.publish,
           lambda: rabbit_queue.ready() == 0)
    refusals_name_their_fields(rabbit_queue.dead_letters())


def _mail(message_id: bytes, *, references: bytes = b"", subject: bytes = b"Hello",
          text: bytes = b"Hello there") -> bytes:
    refs = b"References: " + references + b"\r\n" if references else b""
    return (b"From: Ann <ann@example.com>\r\nTo: desk@example.com\r\n"
            b"Subject: " + subject + b"\r\nMessage-ID: " + message_id + b"\r\n" + refs
            + b"Content-Type: text/plain; charset=utf-8\r\n\r\n" + text + b"\r\n")


MAILS: list[tuple[bytes, str]] = [
    (_mail(b"<k\x00@x>", references=b"<t1@x>"), "idempotency_key"),
    (_mail(b"<k2@x>", references=b"<t\x00@x>"), "entity_id"),
    (_mail(b"<k3@x>", subject=b"Hel\x00lo"), "payload.subject"),
    (_mail(b"<k4@x>", text=b"Hel\x00lo"), "payload.text"),
    (_mail(b"<" + b"k" * MAX_NAME + b"@x>"), "idempotency_key"),
]
"""(mail, the field its refusal names) of each bad mail."""


def test_maildir_refuses_each_bad_field_once(store: Store, db_url: str,
                                             tmp_path: Path) -> None:
    box = mailbox.Maildir(tmp_path / "inbox", create=True)
    watcher = MaildirIntake(Client(store), routes, tmp_path / "inbox",
                            MailOptions(tenant_id=TENANT))
    before = rows_digest(db_url)
    for raw, _ in MAILS:
        box.add(raw)

    outcomes = watcher.process_new()

    assert [o.action for o in outcomes] == ["dead"] * len(MAILS), outcomes
    reasons = sorted(o.reason for o in outcomes)
    for _, field in MAILS:
        assert any(field in r for r in reasons), (field, reasons)
    assert rows_digest(db_url) == before
    dead = mailbox.Maildir(tmp_path / "inbox" / ".dead", create=False)
    assert len(dead) == len(MAILS) and not list((tmp_path / "inbox" / "new").iterdir())
    box.add(_mail(b"<good@x>"))
    [outcome] = watcher.process_new()
    assert outcome.action == "acted" and outcome.result is not None, outcome
    assert outcome.result.action == "started"
    assert watcher.process_new() == []
    assert (watcher.counts.dead, watcher.counts.retried) == (len(MAILS), 0)
    assert [r.run_id for r in store.list_runs(TENANT, limit=100)] == [outcome.result.run_id]


# -- input that does not fit the flow's model: refused at the door, as the webhook does --


KNOWING = intake_world.flows
"""The flows' code, as `underway intake --app` gives it."""
BAD_QUANTITY = "event type 'order.placed': invalid input for flow 'order': quantity: " \
    "Input should be a valid integer, unable to parse string as an integer"


BAD_QUANTITY_ERRORS = [{"loc": ["input", "quantity"], "msg": "Input should be a valid "
                        "integer, unable to parse string as an integer", "type": "int_parsing"}]
"""Each bad field, as the webhook's 422 lists them."""


def refused_at_the_door(store: Store, db_url: str, consumer: ConsumerThread,
                        publish: Any, settled: Any) -> None:
    """A bad order is dead-lettered and stores nothing; the good one after it starts."""
    before = rows_digest(db_url)
    try:
        publish([("bad-qty", json.dumps(order("e-bad", "placed", quantity="lots")).encode())])
        wait_until(lambda: consumer.counts.dead + consumer.counts.retried > 0,
                   "the bad order to be settled")
        assert rows_digest(db_url) == before
        publish([GOOD])
        wait_until(lambda: consumer.counts.acted == 1 and settled(),
                   "the good message to be acted on")
    finally:
        consumer.close()
    assert (consumer.counts.dead, consumer.counts.retried) == (1, 0)
    assert store.get_intake(TENANT, "bad-qty") is None
    assert store.entity_owner(TENANT, "e-bad") is None
    the_good_one_started(store)


def test_nats_refuses_input_that_does_not_fit_the_flow(store: Store, db_url: str,
                                                       nats_stream: NatsStream) -> None:
    consumer = ConsumerThread(NatsIntake(
        Client(store, flows=KNOWING), routes, stream=nats_stream.name,
        subject=nats_stream.subject, servers=nats_stream.url, dead_letter=nats_stream.dead,
        tenant_id=TENANT, ack_wait=2.0, backoff=QUICK))
    refused_at_the_door(store, db_url, consumer, nats_stream.publish, nats_stream.settled)
    [(_, letter)] = nats_stream.dead_letters()
    assert letter["message_id"] == "bad-qty" and letter["reason"] == BAD_QUANTITY
    assert letter["errors"] == BAD_QUANTITY_ERRORS


def test_rabbitmq_refuses_input_that_does_not_fit_the_flow(
    store: Store, db_url: str, rabbit_queue: RabbitQueue,
) -> None:
    consumer = ConsumerThread(RabbitMQIntake(
        Client(store, flows=KNOWING), routes, queue=rabbit_queue.name, url=rabbit_queue.url,
        dead_letter=rabbit_queue.dead, tenant_id=TENANT, backoff=QUICK))
    refused_at_the_door(store, db_url, consumer, rabbit_queue.publish,
                        lambda: rabbit_queue.ready() == 0)
    [(_, letter)] = rabbit_queue.dead_letters()
    assert letter["message_id"] == "bad-qty" and letter["reason"] == BAD_QUANTITY
    assert letter["errors"] == BAD_QUANTITY_ERRORS


def test_maildir_refuses_input_that_does_not_fit_the_flow(store: Store, db_url: str,
                                                          tmp_path: Path) -> None:
    box = mailbox.Maildir(tmp_path / "inbox", create=True)
    watcher = MaildirIntake(Client(store, flows=KNOWING), routes, tmp_path / "inbox",
                            MailOptions(tenant_id=TENANT))
    before = rows_digest(db_url)
    box.add(_mail(b"<m1@x>"))
    [outcome] = watcher.process_new()
    assert outcome.action == "dead"
    assert outcome.reason == ("event type 'mail.received': invalid input for flow 'desk': "
                              "priority: Field required")
    assert rows_digest(db_url) == before
    assert len(mailbox.Maildir(tmp_path / "inbox" / ".dead", create=False)) == 1
