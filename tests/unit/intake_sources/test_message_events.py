"""A queued message's body read as an intake event, and an e-mail read as one: where the
idempotency key comes from, what is refused (and the reason given), what a dead letter
carries."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from email.message import EmailMessage

import pytest

from underway.errors import ConfigurationError
from underway.scheduling.intake_sources import (
    REASON_HEADER,
    MailOptions,
    MalformedMessage,
    event_from_body,
    event_from_mail,
)
from underway.scheduling.intake_sources._messages import DeadLetter, header_reason
from underway.scheduling.intake_sources._nats import subject_matches

AT = datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


def body(**fields: object) -> bytes:
    return json.dumps({"entity_id": "o1", "event_type": "order.placed", **fields}).encode()


def read(raw: bytes, message_id: str | None = "msg-1") -> object:
    return event_from_body(raw, tenant_id="shop", source="nats:S", message_id=message_id,
                           received_at=AT)


def test_the_key_is_the_bodys_else_the_message_id() -> None:
    event = event_from_body(body(payload={"sku": "A"}), tenant_id="shop", source="nats:S",
                            message_id="msg-1", received_at=AT)
    assert (event.idempotency_key, event.tenant_id, event.source) == ("msg-1", "shop", "nats:S")
    assert event.payload == {"sku": "A"} and event.occurred_at == AT
    again = event_from_body(body(idempotency_key="evt-9", occurred_at="2026-01-01T00:00:00Z"),
                            tenant_id="shop", source="nats:S", message_id="msg-1")
    assert again.idempotency_key == "evt-9"
    assert again.occurred_at == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("raw", "message_id", "says"), [
    (b"{oops", "m", "the body is not JSON"),
    (b"[1, 2]", "m", "the body must be a JSON object, not list"),
    (body(event_type=""), "m", "body.event_type: String should have at least 1 character"),
    (body(colour="red"), "m", "body.colour: Extra inputs are not permitted"),
    (body(occurred_at="2026-01-01T00:00:00"), "m", "body.occurred_at"),
    (body(tenant_id="other"), "m", "names tenant 'other'; this consumer takes events for "
                                   "tenant 'shop'"),
    (body(), None, "no idempotency key"),
    (body(purpose="Not A Purpose"), "m", "purpose"),
    (b"\xff\xfe", "m", "the body is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "m", "nests too deeply"),
    (b'{"entity_id": "o", "event_type": "t", "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     "m", "nests too deeply"),
])
def test_a_malformed_body_is_refused_with_the_reason(raw: bytes, message_id: str | None,
                                                      says: str) -> None:
    with pytest.raises(MalformedMessage, match=None) as caught:
        read(raw, message_id)
    assert says in str(caught.value)


def test_the_bodys_own_tenant_is_accepted() -> None:
    assert read(body(tenant_id="shop")).tenant_id == "shop"  # type: ignore[attr-defined]


def test_a_dead_letter_keeps_the_message_and_says_why() -> None:
    letter = DeadLetter("no route for event type 'x'\n(routed: a, b)", "nats:S", "m1",
                        b"\xff binary", {"Nats-Msg-Id": "m1", "x-a": "b"})
    doc = json.loads(letter.encode())
    assert doc["reason"].startswith("no route") and doc["message_id"] == "m1"
    assert base64.b64decode(doc["body_base64"]) == b"\xff binary" and "body" not in doc
    assert doc["headers"] == {"Nats-Msg-Id": "m1", "x-a": "b"}
    fields = letter.header_fields()
    assert fields[REASON_HEADER] == "no route for event type 'x' (routed: a, b)"
    assert fields["x-a"] == "b"
    assert header_reason("caf\u00e9 " + "x" * 2000).startswith("caf\\xe9 ")
    assert len(header_reason("x" * 2000)) == 1000


@pytest.mark.parametrize(("pattern", "subject", "matches"), [
    ("orders.in", "orders.in", True), ("orders.*", "orders.in", True),
    ("orders.*", "orders.in.dead", False), ("orders.>", "orders.in.dead", True),
    ("orders.>", "orders", False), ("orders.in", "orders.dead", False),
])
def test_subject_wildcards(pattern: str, subject: str, matches: bool) -> None:
    assert subject_matches(pattern, subject) is matches


# -- e-mail --------------------------------------------------------------------------------
def mail(**headers: str) -> EmailMessage:
    """A mail; a header given as ``Message_ID=...`` replaces the default, "" drops it."""
    fields = {"From": "Ann Example <Ann@Example.com>", "To": "a@x.org, b@x.org",
              "Subject": "Hello", "Message-ID": "<m1@example.com>",
              "Date": "Tue, 03 Mar 2026 10:00:00 +0100"}
    fields.update({name.replace("_", "-"): value for name, value in headers.items()})
    m = EmailMessage()
    for name, value in fields.items():
        if value:
            m[name] = value
    m.set_content("Hi there")
    return m


def test_a_mail_becomes_an_event_keyed_by_its_message_id() -> None:
    event = event_from_mail(mail().as_bytes(), MailOptions(tenant_id="shop"))
    assert (event.idempotency_key, event.entity_id, event.event_type, event.source) == (
        "m1@example.com", "m1@example.com", "mail.received", "mail")
    assert event.occurred_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    p = event.payload
    assert (p["from"], p["to"], p["subject"], p["text"]) == (
        "Ann@Example.com", ["a@x.org", "b@x.org"], "Hello", "Hi there\n")
    assert p["attachments"] == [] and p["in_reply_to"] is None


def test_a_reply_is_about_its_thread_or_its_sender() -> None:
    reply = mail(**{"Message_ID": "<m3@example.com>", "In_Reply_To": "<m2@example.com>",
                    "References": "<m1@example.com> <m2@example.com>"}).as_bytes()
    assert event_from_mail(reply, MailOptions()).entity_id == "m1@example.com"
    assert event_from_mail(reply, MailOptions(entity="sender")).entity_id == "ann@example.com"


def test_a_mail_without_a_date_occurred_when_it_arrived() -> None:
    event = event_from_mail(mail(Date="").as_bytes(), MailOptions(), received_at=AT)
    assert event.occurred_at == AT and event.payload["date"] is None


def test_html_only_mail_keeps_its_html() -> None:
    m = mail()
    m.set_content("<p>Hi</p>", subtype="html")
    payload = event_from_mail(m.as_bytes(), MailOptions()).payload
    assert payload["text"] is None and payload["html"].startswith("<p>Hi</p>")


@pytest.mark.parametrize(("raw", "says"), [
    (mail(Message_ID="").as_bytes(), "no Message-ID header"),
    (mail(From="").as_bytes(), "no readable From address"),
    (mail(From="not an address").as_bytes(), "no readable From address"),
    (b"", "no Message-ID header"),
])
def test_a_malformed_mail_is_refused_with_the_reason(raw: bytes, says: str) -> None:
    with pytest.raises(MalformedMessage) as caught:
        event_from_mail(raw, MailOptions())
    assert says in str(caught.value)


def test_mail_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="entity must be 'thread' or 'sender'"):
        MailOptions(entity="subject")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_attachment must not be negative"):
        MailOptions(max_attachment=-1)
    with pytest.raises(ConfigurationError, match="event_type must not be empty"):
        MailOptions(event_type="")
