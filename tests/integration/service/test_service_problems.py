"""Bad input is a 4xx problem+json naming the field, never a 500, and changes nothing:
invalid JSON, an unknown flow (on a server that has the flows), a bad cursor, missing
fields, wrong types, unknown fields, a decision for another run or badly signed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakes.service_world import World
from underway.guard.approvals import sign_decision


@pytest.fixture
def strict(db_url: str) -> Iterator[World]:
    """A server whose client has the flows: starts are checked against them."""
    w = World(db_url, flows=True)
    yield w
    w.close()


CASES: list[tuple[str, str, dict[str, Any], int, str]] = [
    ("POST", "/v1/runs", {"content": b'{"flow": ', "headers": {
        "content-type": "application/json"}}, 400, "body"),
    ("POST", "/v1/runs", {"json": {"flow": "nope", "input": {}}}, 422, "body.flow"),
    ("POST", "/v1/runs", {"json": {"flow": "reminders", "input": {"invoice": 1}}}, 422,
     "body.input.invoice"),
    ("POST", "/v1/runs", {"json": {"input": {}}}, 422, "body.flow"),
    ("POST", "/v1/runs", {"json": {"flow": 7}}, 422, "body.flow"),
    ("POST", "/v1/runs", {"json": {"flow": "reminders", "inptu": {}}}, 422, "body.inptu"),
    ("POST", "/v1/runs", {"json": ["reminders"]}, 422, "body"),
    ("GET", "/v1/runs", {"params": {"cursor": "not-a-cursor"}}, 422, "query.cursor"),
    ("GET", "/v1/runs", {"params": {"limit": "many"}}, 422, "query.limit"),
    ("GET", "/v1/runs", {"params": {"limit": 0}}, 422, "query.limit"),
    ("GET", "/v1/runs", {"params": {"status": "sleeping"}}, 422, "query.status"),
    ("GET", "/v1/runs", {"params": {"created_since": "yesterday"}}, 422,
     "query.created_since"),
    ("POST", "/v1/api-keys", {"json": {"role": "root"}}, 422, "body.role"),
    ("POST", "/v1/approvers", {"json": {"approver_id": "x", "public_key": "abc",
                                        "roles": ["r"]}}, 422, "body.public_key"),
    ("GET", "/v1/usage", {"params": {"days": -1}}, 422, "query.days"),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "field"), CASES)
def test_bad_input_is_a_problem_naming_the_field_and_stores_nothing(
    strict: World, method: str, path: str, kwargs: dict[str, Any], status: int, field: str,
) -> None:
    r = strict.call(method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == status and problem["type"].startswith("urn:underway:problem:")
    assert field in [e["field"] for e in problem["errors"]], problem
    assert strict.store.list_runs("acme") == []
    assert strict.store.list_approvers("acme") == []
    assert len(strict.store.list_api_keys("acme")) == 5


def test_a_malformed_flow_name_is_named_by_a_server_without_the_flows(world: World) -> None:
    for name in ("a b", "z#", "\u00a1"):
        r = world.call("POST", "/v1/runs", role="operator", json={"flow": name, "input": {}})
        assert r.status_code == 422, r.text
        assert [e["field"] for e in r.json()["errors"]] == ["body.flow"]
    assert world.store.list_runs("acme") == []


def test_steering_bodies_are_checked(world: World) -> None:
    run_id = world.start()
    for action, body, field in (
        ("signals", {"payload": 1}, "body.name"),
        ("signals", {"name": "underway.cancel"}, "body.name"),
        ("resolve", {"resolution": "maybe"}, "body.resolution"),
        ("cancel", {"reason": 5}, "body.reason"),
    ):
        r = world.call("POST", f"/v1/runs/{run_id}/{action}", role="operator", json=body)
        assert r.status_code == 422, r.text
        assert field in [e["field"] for e in r.json()["errors"]]
    assert world.store.pending_signals("acme", run_id) == []


def test_a_decision_for_another_run_or_badly_signed_is_refused(world: World) -> None:
    alice = world.approver("acme", "alice", "finance")
    mallory = world.approver("acme", "mallory", "finance")
    refund = world.start("refunds", "INV-2")
    other = world.start("refunds", "INV-3")
    [pending] = world.client_pending(refund)

    def decision(key: Any = alice, **changes: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "request_id": pending["request_id"], "run_id": refund, "tenant_id": "acme",
            "tool": "refund", "args_hash": pending["args_hash"], "decision": "approve",
            "expires_at": pending["expires_at"], "approver_id": "alice"}
        fields.update(changes)
        return sign_decision(key, **fields).model_dump(mode="json")

    def post(run_id: str, body: Any) -> Any:
        return world.call("POST", f"/v1/approvals/{run_id}/decision", role="approver",
                          json=body)

    r = post(other, decision())
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.run_id"
    r = post(refund, decision(mallory))
    assert r.status_code == 422 and r.json()["type"].endswith("decision-refused")
    r = post(refund, {**decision(), "comment": "changed after signing"})
    assert r.status_code == 422 and "signature" in r.json()["detail"]
    r = post(refund, {k: v for k, v in decision().items() if k != "nonce"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.nonce"
    # Well signed by a registered approver, yet not what the run waits for: refused now,
    # not only when the run resumes.
    [on_other] = world.client_pending(other)
    for changes, reason in [
        ({"args_hash": on_other["args_hash"]}, "args_mismatch"),
        ({"request_id": on_other["request_id"]}, "wrong_request"),
        ({"tool": "charge"}, "wrong_tool"),
        ({"expires_at": pending["expires_at"] + 1}, "decision_expiry_mismatch"),
    ]:
        r = post(refund, decision(**changes))
        assert r.status_code == 422 and r.json()["type"].endswith("decision-refused")
        assert f"({reason})" in r.json()["detail"], r.text
    r = post(refund, decision(decision="answer", answer="yes"))
    assert r.status_code == 422 and "does not settle an approval" in r.json()["detail"]
    r = post(refund, decision(world.approver("acme", "carol", "support"), approver_id="carol"))
    assert r.status_code == 422 and "(missing_role)" in r.json()["detail"]
    assert world.store.pending_signals("acme", refund) == []

    good = decision()
    r = post(refund, good)
    assert r.status_code == 202 and r.json()["delivered"] is True
    assert post(refund, good).json()["delivered"] is False
    world.drive()
    assert world.call("GET", f"/v1/runs/{refund}").json()["status"] == "completed"
