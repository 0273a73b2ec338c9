"""Intake webhooks: only a delivery signed with the source's secret over its exact body and
a fresh timestamp is acted on; a bad signature, a stale timestamp, a replayed body with a
new timestamp, a body changed after signing and a missing signature are refused with
nothing stored; a valid delivery repeated five times acts once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fakes.service_world import World
from underway import webhooks
from underway.store.base import IntakeSecretRecord

SECRET = "whsec_" + "k" * 40


def body(key: str = "evt-1", **changes: Any) -> bytes:
    event = {"entity_id": "INV-1", "event_type": "invoice.created", "idempotency_key": key,
             "payload": {"invoice": "INV-1", "amount": 10}, **changes}
    return json.dumps(event).encode()


def deliver(world: World, data: bytes, headers: dict[str, str],
            source: str = "billing") -> Any:
    return world.call("POST", f"/v1/intake/{source}", role="intake", content=data,
                      headers={"content-type": "application/json", **headers})


@pytest.fixture
def secret(world: World) -> str:
    world.store.put_intake_secret(IntakeSecretRecord("acme", "billing", SECRET,
                                                     world.clock.now()))
    return SECRET


def nothing_stored(world: World) -> bool:
    return world.store.list_runs("acme") == [] and world.store.get_intake("acme",
                                                                          "evt-1") is None


def test_a_valid_delivery_repeated_five_times_acts_once(world: World, secret: str) -> None:
    data = body()
    headers = webhooks.sign(secret, data, at=world.clock.now())
    answers = [deliver(world, data, headers).json() for _ in range(5)]
    assert answers[0]["action"] == "started"
    run_id = answers[0]["run_id"]
    assert [a["action"] for a in answers[1:]] == ["duplicate"] * 4
    assert {a["run_id"] for a in answers} == {run_id}
    assert [r.run_id for r in world.store.list_runs("acme")] == [run_id]
    world.drive()
    paid = body("evt-2", event_type="invoice.paid", payload={"amount": 10})
    signalled = deliver(world, paid, webhooks.sign(secret, paid, at=world.clock.now()))
    assert signalled.json() == {"action": "signalled", "run_id": run_id, "reason": ""}


@pytest.mark.parametrize("attack", [
    "bad_signature", "stale_timestamp", "future_timestamp", "replayed_with_new_timestamp",
    "changed_after_signing", "missing_signature", "other_secret",
])
def test_forged_stale_replayed_or_changed_deliveries_are_refused(
    world: World, secret: str, attack: str,
) -> None:
    now = world.clock.now()
    data = body()
    headers = webhooks.sign(secret, data, at=now)
    if attack == "bad_signature":
        headers[webhooks.SIGNATURE_HEADER] = "v1=" + "0" * 64
    elif attack == "stale_timestamp":
        headers = webhooks.sign(secret, data, at=now - webhooks.REPLAY_WINDOW - 1)
    elif attack == "future_timestamp":
        headers = webhooks.sign(secret, data, at=now + webhooks.REPLAY_WINDOW + 1)
    elif attack == "replayed_with_new_timestamp":
        old = webhooks.sign(secret, data, at=now - 3600)
        headers = {**old, webhooks.TIMESTAMP_HEADER: str(int(now))}
    elif attack == "changed_after_signing":
        data = body(payload={"invoice": "INV-1", "amount": 10_000})
    elif attack == "missing_signature":
        headers = {}
    elif attack == "other_secret":
        headers = webhooks.sign("whsec_" + "x" * 40, data, at=now)
    r = deliver(world, data, headers)
    assert r.status_code == 401, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"].startswith("urn:underway:problem:")
    assert nothing_stored(world)


def test_an_old_delivery_replayed_after_the_window_is_refused(world: World,
                                                              secret: str) -> None:
    data = body()
    headers = webhooks.sign(secret, data, at=world.clock.now())
    assert deliver(world, data, headers).json()["action"] == "started"
    world.clock.advance(webhooks.REPLAY_WINDOW + 1)
    r = deliver(world, data, headers)
    assert r.status_code == 401 and r.json()["type"].endswith("stale-timestamp")


def test_an_unknown_source_or_a_bad_event_is_refused_naming_why(world: World,
                                                                secret: str) -> None:
    data = body()
    r = deliver(world, data, webhooks.sign(secret, data, at=world.clock.now()),
                source="unknown")
    assert r.status_code == 404
    broken = b'{"entity_id": "INV-1", '
    r = deliver(world, broken, webhooks.sign(secret, broken, at=world.clock.now()))
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "body"
    missing = json.dumps({"event_type": "invoice.created", "payload": 1}).encode()
    r = deliver(world, missing, webhooks.sign(secret, missing, at=world.clock.now()))
    assert r.status_code == 422
    assert {e["field"] for e in r.json()["errors"]} == {"body.entity_id"}
    no_key = json.dumps({"entity_id": "INV-1", "event_type": "invoice.created"}).encode()
    r = deliver(world, no_key, webhooks.sign(secret, no_key, at=world.clock.now()))
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.idempotency_key"
    assert nothing_stored(world)


def test_the_idempotency_key_may_come_in_a_header(world: World, secret: str) -> None:
    data = json.dumps({"entity_id": "INV-1", "event_type": "invoice.created",
                       "payload": {"invoice": "INV-1", "amount": 1}}).encode()
    headers = webhooks.sign(secret, data, at=world.clock.now(), idempotency_key="h-1")
    assert deliver(world, data, headers).json()["action"] == "started"
    assert deliver(world, data, headers).json()["action"] == "duplicate"


def test_a_delivery_with_a_traceparent_starts_its_run_in_the_senders_trace(
    world: World, secret: str,
) -> None:
    carrier = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
               "tracestate": "vendor=1"}
    data = body()
    answer = deliver(world, data, {**webhooks.sign(secret, data, at=world.clock.now()),
                                   **carrier}).json()
    assert answer["action"] == "started"
    assert world.engine.state(answer["run_id"], tenant_id="acme").trace_context == carrier
