"""Subjects, purpose and consent through the API on a real server: a start names its
subject, purpose and consent reference (kept on the run, shown in listings, journaled);
bad ones are refused naming the field, with nothing stored; consent is granted and
withdrawn by operators and admins only, read by any reader, and answered as where it
stands now and its whole history; an intake webhook carries purpose and consent."""

from __future__ import annotations

import json

import pytest

from fakes.service_world import World
from underway import webhooks
from underway.store.base import IntakeSecretRecord

INVOICE = {"invoice": "INV-1", "amount": 5}


def test_a_start_names_its_subject_purpose_and_consent(world: World) -> None:
    r = world.call("POST", "/v1/runs", role="operator", json={
        "flow": "reminders", "input": INVOICE, "subject": "cust-42", "purpose": "collections",
        "consent": "CM-9"})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    run = world.call("GET", f"/v1/runs/{run_id}", role="viewer").json()
    assert (run["subject"], run["purpose"]) == ("cust-42", "collections")
    listed = world.call("GET", "/v1/runs", role="viewer").json()["runs"]
    assert [(x["subject"], x["purpose"]) for x in listed] == [("cust-42", "collections")]
    events = world.call("GET", f"/v1/runs/{run_id}/events", role="viewer").json()
    started = events[0]["data"]
    assert (started["subject"], started["purpose"], started["consent"]) == (
        "cust-42", "collections", "CM-9")
    plain = world.start(invoice="INV-2", drive=False)
    run = world.call("GET", f"/v1/runs/{plain}", role="viewer").json()
    assert (run["subject"], run["purpose"]) == (None, "operations")


@pytest.mark.parametrize(("field", "value"), [
    ("subject", "cust 42"), ("subject", ""), ("subject", "x" * 201),
    ("purpose", "Marketing"), ("purpose", "mark eting"), ("purpose", ""),
    ("consent", " CM-1"), ("consent", ""),
])
def test_a_bad_subject_purpose_or_consent_is_refused_naming_it(
    world: World, field: str, value: str
) -> None:
    r = world.call("POST", "/v1/runs", role="operator", json={
        "flow": "reminders", "input": INVOICE, field: value})
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == [f"body.{field}"]
    assert world.store.list_runs("acme") == []


def test_consent_is_granted_withdrawn_and_shown_with_its_history(world: World) -> None:
    granted = world.call("POST", "/v1/consents", role="operator", json={
        "subject": "cust-42", "purpose": "marketing", "state": "granted",
        "reference": "CM-1"})
    assert granted.status_code == 201, granted.text
    assert granted.json() | {"at": 0} == {
        "seq": granted.json()["seq"], "subject": "cust-42", "purpose": "marketing",
        "state": "granted", "reference": "CM-1", "by": "apikey:acme-operator", "at": 0}
    world.call("POST", "/v1/consents", role="admin", json={
        "subject": "cust-42", "purpose": "service", "state": "granted"})
    withdrawn = world.call("POST", "/v1/consents", role="admin", json={
        "subject": "cust-42", "purpose": "marketing", "state": "withdrawn"})
    assert withdrawn.json()["seq"] > granted.json()["seq"]

    shown = world.call("GET", "/v1/consents", role="viewer",
                       params={"subject": "cust-42"}).json()
    assert {c["purpose"]: c["state"] for c in shown["current"]} == {
        "marketing": "withdrawn", "service": "granted"}
    assert [(c["purpose"], c["state"]) for c in shown["history"]] == [
        ("marketing", "granted"), ("service", "granted"), ("marketing", "withdrawn")]
    only = world.call("GET", "/v1/consents", role="viewer",
                      params={"subject": "cust-42", "purpose": "service"}).json()
    assert [c["purpose"] for c in only["current"] + only["history"]] == ["service", "service"]
    other = world.call("GET", "/v1/consents", tenant="globex", role="admin",
                       params={"subject": "cust-42"}).json()
    assert other == {"subject": "cust-42", "current": [], "history": []}


def test_only_operators_and_admins_record_consent(world: World) -> None:
    body = {"subject": "cust-1", "purpose": "marketing", "state": "granted"}
    for role in ("viewer", "approver", "intake"):
        r = world.call("POST", "/v1/consents", role=role, json=body)
        assert r.status_code == 403, role
    assert world.store.consent_history("acme", "cust-1") == []
    r = world.call("POST", "/v1/consents", role="operator", json={**body, "state": "maybe"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.state"
    r = world.call("GET", "/v1/consents", role="viewer", params={"subject": "a b"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "query.subject"


def test_an_intake_webhook_carries_purpose_and_consent(world: World) -> None:
    secret = "s" * 32
    world.store.put_intake_secret(IntakeSecretRecord("acme", "billing", secret,
                                                     world.clock.now()))
    body = json.dumps({"entity_id": "INV-7", "event_type": "invoice.created",
                       "idempotency_key": "evt-7", "payload": INVOICE,
                       "purpose": "collections", "consent": "CM-7"}).encode()
    r = world.call("POST", "/v1/intake/billing", role="intake", content=body, headers={
        "content-type": "application/json", **webhooks.sign(secret, body,
                                                            at=world.clock.now())})
    assert r.status_code == 200 and r.json()["action"] == "started", r.text
    run = world.call("GET", f"/v1/runs/{r.json()['run_id']}", role="viewer").json()
    assert run["purpose"] == "collections"
    bad = json.dumps({"entity_id": "INV-8", "event_type": "invoice.created",
                      "idempotency_key": "evt-8", "purpose": "Not A Name"}).encode()
    r = world.call("POST", "/v1/intake/billing", role="intake", content=bad, headers={
        "content-type": "application/json", **webhooks.sign(secret, bad,
                                                            at=world.clock.now())})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.purpose"
