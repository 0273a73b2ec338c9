"""``POST /v1/runs/bulk/{action}`` on a real server, on SQLite and a real PostgreSQL: a
dry run by default, the filter of ``GET /v1/runs``, one journaled action per run with the
key's name, signed decisions per run, and the key's tenant and role respected."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fakes import bulk_flows
from fakes.bulk_flows import QUESTION
from fakes.service_world import World
from underway import events as ev
from underway.guard.approvals import sign_decision


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    w = World(db_url)
    for flow in bulk_flows.FLOWS:
        w.engine.register(flow)
    bulk_flows.OUTAGE[0] = True
    yield w
    w.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                       else "pg_url"))


def start(world: World, flow: str, n: int, tenant: str = "acme") -> list[str]:
    ids = []
    for i in range(n):
        r = world.call("POST", "/v1/runs", tenant=tenant, role="operator",
                       json={"flow": flow, "input": {"sku": f"SKU-{i}"}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["run_id"])
    world.drive()
    return ids


def status(world: World, run_id: str, tenant: str = "acme") -> str:
    r = world.call("GET", f"/v1/runs/{run_id}", tenant=tenant, role="viewer")
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


def events(world: World, run_id: str, kind: type[ev.Event], tenant: str = "acme") -> list[Any]:
    return [r.event for r in world.engine.journal.history(tenant, run_id)
            if isinstance(r.event, kind)]


def test_nine_dead_runs_are_resumed_with_one_request_after_a_dry_run(world: World) -> None:
    dead = start(world, "brittle", 9)
    waiting = start(world, "asking", 1)
    dry = world.call("POST", "/v1/runs/bulk/resume", params={"flow": "brittle"},
                     role="operator", json={})
    assert dry.status_code == 200, dry.text
    report = dry.json()
    assert (report["dry_run"], report["matched"], report["counts"]["eligible"]) == (
        True, 9, 9)
    assert sorted(r["run_id"] for r in report["runs"]) == sorted(dead)
    assert {status(world, r) for r in dead} == {"dead"}

    bulk_flows.OUTAGE[0] = False
    done = world.call("POST", "/v1/runs/bulk/resume", params={"flow": "brittle"},
                      role="operator", json={"dry_run": False})
    assert done.status_code == 200, done.text
    assert done.json()["counts"]["done"] == 9
    world.drive()
    for run_id in dead:
        assert status(world, run_id) == "completed"
        assert [e.by for e in events(world, run_id, ev.RunResumed)] == [
            "apikey:acme-operator"]
    assert status(world, waiting[0]) == "escalated"


def test_twenty_eight_questions_are_answered_with_one_request(world: World) -> None:
    key = world.approver("acme", "priya", "support")
    asking = start(world, "asking", 28)
    query = {"flow": "asking", "status": "escalated"}
    body = {"question": QUESTION, "answer": "Pune"}
    dry = world.call("POST", "/v1/runs/bulk/answer", params=query, role="approver", json=body)
    assert dry.status_code == 200, dry.text
    to_sign = [(r["run_id"], r["request_id"]) for r in dry.json()["runs"]
               if r["outcome"] == "eligible"]
    assert len(to_sign) == 28
    decisions = [sign_decision(
        key, request_id=request_id, run_id=run_id, tenant_id="acme", tool="", args_hash="",
        decision="answer", expires_at=world.clock.now() + 3600, approver_id="priya",
        answer="Pune").model_dump(mode="json") for run_id, request_id in to_sign]

    r = world.call("POST", "/v1/runs/bulk/answer", params=query, role="approver",
                   json={**body, "dry_run": False, "decisions": decisions})
    assert r.status_code == 200, r.text
    assert r.json()["counts"]["done"] == 28 and r.json()["unused_decisions"] == []
    world.drive()
    for run_id in asking:
        [answered] = events(world, run_id, ev.EscalationAnswered)
        assert (answered.approver_id, answered.answer) == ("priya", "Pune")
        assert status(world, run_id) == "completed"

    again = world.call("POST", "/v1/runs/bulk/answer", params=query, role="approver",
                       json={**body, "dry_run": False, "decisions": decisions})
    assert again.json()["matched"] == 0


def test_a_run_without_its_signed_decision_is_skipped(world: World) -> None:
    key = world.approver("acme", "priya", "support")
    first, second = start(world, "asking", 2)
    dry = world.call("POST", "/v1/runs/bulk/answer", role="approver",
                     json={"question": QUESTION, "answer": "Pune"})
    request_of = {r["run_id"]: r["request_id"] for r in dry.json()["runs"]}
    signed = sign_decision(
        key, request_id=request_of[first], run_id=first, tenant_id="acme", tool="",
        args_hash="", decision="answer", expires_at=world.clock.now() + 3600,
        approver_id="priya", answer="Pune").model_dump(mode="json")
    r = world.call("POST", "/v1/runs/bulk/answer", role="approver",
                   json={"question": QUESTION, "answer": "Pune", "dry_run": False,
                         "decisions": [signed]})
    outcomes = {x["run_id"]: (x["outcome"], x["reason"]) for x in r.json()["runs"]}
    assert outcomes[first] == ("done", "")
    assert outcomes[second] == ("skipped", f"no signed decision was given for run {second} "
                                            "on its request, with this verdict and answer")
    # A decision the run would refuse fails for that run, and is not sent.
    forged = sign_decision(
        Ed25519PrivateKey.generate(), request_id=request_of[second], run_id=second,
        tenant_id="acme", tool="", args_hash="", decision="answer",
        expires_at=world.clock.now() + 3600, approver_id="priya",
        answer="Pune").model_dump(mode="json")
    r = world.call("POST", "/v1/runs/bulk/answer", role="approver",
                   json={"question": QUESTION, "answer": "Pune", "dry_run": False,
                         "decisions": [forged]})
    [failed] = [x for x in r.json()["runs"] if x["run_id"] == second]
    assert failed["outcome"] == "failed" and "bad_signature" in failed["reason"]
    assert world.store.pending_signals("acme", second) == []
    # A decision whose answer is not the one the request sends is not used either.
    r = world.call("POST", "/v1/runs/bulk/answer", role="approver",
                   json={"question": QUESTION, "answer": "Delhi", "dry_run": False,
                         "decisions": [signed]})
    assert {x["outcome"] for x in r.json()["runs"]} == {"skipped"}


def test_keys_act_only_in_their_tenant_and_role(world: World) -> None:
    ours = start(world, "brittle", 2, tenant="acme")
    theirs = start(world, "brittle", 3, tenant="globex")
    assert world.call("POST", "/v1/runs/bulk/resume", role="viewer",
                      json={"dry_run": False}).status_code == 403
    assert world.call("POST", "/v1/runs/bulk/resume", role="approver",
                      json={"dry_run": False}).status_code == 403
    assert world.call("POST", "/v1/runs/bulk/settle", role="operator",
                      json={"resolution": "resume"}).status_code == 403
    assert world.call("POST", "/v1/runs/bulk/cancel", role="approver",
                      json={"dry_run": False}).status_code == 403
    assert world.call("POST", "/v1/runs/bulk/answer", role="operator",
                      json={"question": QUESTION, "answer": "A"}).status_code == 403
    # An operator key may steer, not deliver signed decisions.
    r = world.call("POST", "/v1/runs/bulk/resume", role="operator",
                   json={"dry_run": False, "decisions": [{}]})
    assert r.status_code == 422 and "body.decisions" in r.json()["detail"]

    r = world.call("POST", "/v1/runs/bulk/cancel", tenant="globex", role="admin",
                   json={"dry_run": False})
    assert r.status_code == 200
    assert sorted(x["run_id"] for x in r.json()["runs"]) == sorted(theirs)
    world.drive()
    assert {status(world, x) for x in ours} == {"dead"}
    assert {status(world, x, tenant="globex") for x in theirs} == {"cancelled"}
    for run_id in theirs:
        assert [e.by for e in events(world, run_id, ev.RunCancelled, "globex")] == [
            "apikey:globex-admin"]


def test_bad_requests_name_the_problem_and_send_nothing(world: World) -> None:
    dead = start(world, "brittle", 1)
    cases: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
        ("resume", {"status": "deadish"}, {"dry_run": False}, "query.status"),
        ("resume", {}, {"dry_run": False, "stepp": "x"}, "body.stepp"),
        ("settle", {}, {"resolution": "failed", "step": "x"}, "body.step"),
        ("resolve", {}, {"dry_run": False}, "body.resolution"),
        ("answer", {}, {"dry_run": False, "answer": "A"}, "body.question"),
        ("answer", {}, {"dry_run": False, "question": QUESTION, "answer": "A",
                        "decisions": [{"run_id": dead[0]}]}, "body.decisions.0"),
    ]
    for action, query, body, field in cases:
        role = "approver" if action in ("answer", "settle") else "operator"
        r = world.call("POST", f"/v1/runs/bulk/{action}", params=query, json=body, role=role)
        assert r.status_code == 422, (action, r.text)
        assert field in r.json()["detail"], r.text
    world.drive()
    assert status(world, dead[0]) == "dead"
    assert events(world, dead[0], ev.SignalIgnored) == []


def test_bulk_operations_are_in_the_openapi_document_with_their_roles(world: World) -> None:
    paths = world.http.get("/openapi.json").json()["paths"]
    for action, roles in (("resume", {"operator", "admin"}), ("cancel", {"operator", "admin"}),
                          ("resolve", {"operator", "admin"}), ("settle", {"approver"}),
                          ("answer", {"approver"}),
                          ("approve", {"approver"}), ("reject", {"approver"})):
        op = paths[f"/v1/runs/bulk/{action}"]["post"]
        assert set(op["x-underway-roles"]) == roles
        assert {p["name"] for p in op["parameters"]} >= {"status", "flow", "created_since", "q"}
        assert "BulkReport" in str(op["responses"]["200"])


def test_where_resolutions_are_signed_a_bulk_resume_is_refused_or_signed_per_run(
    world: World,
) -> None:
    dead = start(world, "brittle", 2)
    world.app.state.underway.client.signed_resolutions = True
    r = world.call("POST", "/v1/runs/bulk/resume", role="operator", json={"dry_run": False})
    assert r.status_code == 409, r.text
    assert "an unsigned bulk resume is refused here" in r.json()["detail"]
    assert "/v1/runs/bulk/settle" in r.json()["detail"]
    assert all(world.store.pending_signals("acme", x) == [] for x in dead)

    key = world.approver("acme", "lead", "ops")
    dry = world.call("POST", "/v1/runs/bulk/settle", role="approver",
                     json={"resolution": "resume"})
    assert dry.status_code == 200, dry.text
    decisions = [sign_decision(
        key, request_id=x["request_id"], run_id=x["run_id"], tenant_id="acme", tool="",
        args_hash="", decision="resolve", expires_at=world.clock.now() + 3600,
        approver_id="lead", answer={"resolution": "resume", "step": None},
    ).model_dump(mode="json") for x in dry.json()["runs"]]
    assert len(decisions) == 2
    r = world.call("POST", "/v1/runs/bulk/settle", role="approver",
                   json={"resolution": "resume", "dry_run": False, "decisions": decisions})
    assert r.json()["counts"]["done"] == 2, r.text
    bulk_flows.OUTAGE[0] = False
    world.engine.guard.signed_resolutions = True
    world.drive()
    for run_id in dead:
        [resumed] = events(world, run_id, ev.RunResumed)
        assert resumed.decision is not None and resumed.decision["approver_id"] == "lead"
        assert status(world, run_id) == "completed"
