"""Input that does not fit a flow's input model is refused with one problem shape at
every door of the API: a 422 problem+json whose ``detail`` names each bad field in words
and whose ``errors`` list each (loc, msg, type). Nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from fakes.service_world import World
from underway import webhooks
from underway.store.base import IntakeSecretRecord

SECRET = "whsec_" + "k" * 40


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    """A server that has the flows' code, as `underway serve --app` does."""
    w = World(db_url, flows=True)
    yield w
    w.close()


def fields(problem: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {e["field"]: (e["msg"], e["type"]) for e in problem["errors"]}


def test_starting_a_run_with_bad_input_names_each_field(world: World) -> None:
    r = world.call("POST", "/v1/runs", role="operator",
                   json={"flow": "reminders", "input": {"amount": "lots"}})
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    p = r.json()
    assert p["type"] == "urn:underway:problem:invalid-input"
    assert p["detail"] == ("invalid input for flow 'reminders': invoice: Field required; "
                           "amount: Input should be a valid integer, unable to parse string "
                           "as an integer")
    assert fields(p) == {
        "body.input.invoice": ("Field required", "missing"),
        "body.input.amount": ("Input should be a valid integer, unable to parse string as "
                              "an integer", "int_parsing"),
    }
    assert [e["loc"] for e in p["errors"]] == [["body", "input", "invoice"],
                                               ["body", "input", "amount"]]
    assert world.store.list_runs("acme") == []


def test_a_webhook_whose_payload_does_not_fit_is_refused_the_same_way(world: World) -> None:
    world.store.put_intake_secret(IntakeSecretRecord("acme", "billing", SECRET,
                                                     world.clock.now()))
    data = json.dumps({"entity_id": "INV-9", "event_type": "invoice.created",
                       "idempotency_key": "evt-9", "payload": {"invoice": "INV-9"}}).encode()
    r = world.call("POST", "/v1/intake/billing", role="intake", content=data,
                   headers={"content-type": "application/json",
                            **webhooks.sign(SECRET, data, at=world.clock.now())})
    assert r.status_code == 422
    p = r.json()
    assert p["type"] == "urn:underway:problem:intake-refused"
    assert p["detail"] == ("event type 'invoice.created': invalid input for flow "
                           "'reminders': amount: Field required")
    assert fields(p) == {"input.amount": ("Field required", "missing")}
    assert world.store.list_runs("acme") == []
    assert world.store.get_intake("acme", "evt-9") is None


def test_a_malformed_request_lists_its_fields_with_their_types(world: World) -> None:
    r = world.call("POST", "/v1/runs", role="operator", json={"input": {}})
    assert r.status_code == 422
    p = r.json()
    assert p["detail"] == "body.flow: Field required"
    assert p["errors"] == [{"field": "body.flow", "message": "Field required",
                            "loc": ["body", "flow"], "msg": "Field required",
                            "type": "missing"}]
