"""The console's signed bulk decisions (``/approvals/bulk``), on a real server over SQLite
and a real PostgreSQL. The dry run lists the runs and the fields each decision signs; the
post carries one decision per run, signed here with the approver's key as the browser
signs it. CSRF and roles are checked as on the other forms; a forged or missing decision
fails or skips its own run only."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes import bulk_flows
from fakes.console_browser import csrf_of, sign_in
from fakes.procurement_flows import FLOWS as DESK
from fakes.service_world import FLOWS, World
from underway.guard.approvals import sign_decision
from underway.service.console import _bulk_decide

ORDER = {"po": "PO-1", "supplier": {"name": "Shakti Steel"}, "amount": "1200.00",
         "currency": "INR", "from_account": "HDFC-OPS-0042"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                       else "pg_url"))


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    w = World(db_url)
    w.engine = uw.Engine(w.worker_store, flows=[*FLOWS, *DESK, *bulk_flows.FLOWS],
                         clock=w.clock)
    yield w
    w.close()


def start(world: World, flow: str, data: dict[str, Any], n: int) -> list[str]:
    ids = []
    for i in range(n):
        r = world.call("POST", "/v1/runs", role="operator",
                       json={"flow": flow, "input": {**data, **({"po": f"PO-{i}"}
                                                                if "po" in data else {})}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["run_id"])
    world.drive()
    return ids


def fields_of(page: str) -> list[dict[str, Any]]:
    """The per-run signing fields the dry-run page hands the browser."""
    found = re.search(r'<script type="application/json" id="bulk-fields">(.*?)</script>',
                      page, re.S)
    assert found, page
    return list(json.loads(html.unescape(found.group(1))))


def signed(key: Ed25519PrivateKey, f: dict[str, Any], decision: str, answer: Any,
           approver: str = "pat") -> dict[str, Any]:
    return sign_decision(
        key, request_id=f["request_id"], run_id=f["run_id"], tenant_id=f["tenant_id"],
        tool=f["tool"], args_hash=f["args_hash"], decision=decision,  # type: ignore[arg-type]
        expires_at=f["expires_at"], approver_id=approver, comment="bulk",
        answer=answer).model_dump(mode="json")


def post(browser: httpx.Client, csrf: str | None, body: dict[str, Any],
         params: dict[str, str] | None = None) -> httpx.Response:
    headers = {"X-CSRF-Token": csrf} if csrf else {}
    return browser.post("/approvals/bulk", params=params, json=body, headers=headers)


def test_an_approver_answers_every_run_asking_one_question(world: World) -> None:
    asking = start(world, "asking", {"sku": "A"}, 5)
    key = world.approver("acme", "pat", "support")
    with sign_in(world, role="approver") as browser:
        inbox = browser.get("/approvals").text
        assert "Answer all 5 runs waiting on" in html.unescape(inbox)
        dry = browser.get("/approvals/bulk", params={"action": "answer",
                                                     "question": bulk_flows.QUESTION})
        assert dry.status_code == 200, dry.text
        assert re.search(r'data-count="eligible">5<', dry.text)
        fields = fields_of(dry.text)
        assert sorted(f["run_id"] for f in fields) == sorted(asking)
        # A dry run sends nothing.
        assert all(world.store.pending_signals("acme", r) == [] for r in asking)
        forged, missing, *good = fields
        decisions = [signed(key, f, "answer", "Pune") for f in good]
        decisions.append(signed(Ed25519PrivateKey.generate(), forged, "answer", "Pune"))
        r = post(browser, csrf_of(dry.text), {"action": "answer",
                                              "question": bulk_flows.QUESTION,
                                              "answer": "Pune", "decisions": decisions})
        assert r.status_code == 200, r.text
        report = {x["run_id"]: x for x in r.json()["runs"]}
    assert r.json()["counts"]["done"] == 3
    assert report[forged["run_id"]]["outcome"] == "failed"
    assert "signature" in report[forged["run_id"]]["reason"]
    assert report[missing["run_id"]]["outcome"] == "skipped"
    assert "no signed decision" in report[missing["run_id"]]["reason"]
    world.drive()
    for f in good:
        assert world.call("GET", f"/v1/runs/{f['run_id']}").json()["status"] == "completed"
        log = world.call("GET", f"/v1/runs/{f['run_id']}/events").json()
        [answered] = [e for e in log if e["type"] == "EscalationAnswered"]
        assert answered["data"]["decision"]["approver_id"] == "pat"
        assert answered["data"]["decision"]["answer"] == "Pune"
    for f in (forged, missing):
        assert world.call("GET", f"/v1/runs/{f['run_id']}").json()["status"] == "escalated"


def test_an_approver_approves_some_held_calls_and_rejects_others(world: World) -> None:
    held = start(world, "procure", ORDER, 4)
    key = world.approver("acme", "pat", "procurement")
    with sign_in(world, role="approver") as browser:
        inbox = html.unescape(browser.get("/approvals").text)
        assert "Approve or reject all 4 held calls of" in inbox
        dry = browser.get("/approvals/bulk", params={"action": "approve",
                                                     "tool": "pay_supplier",
                                                     "flow": "procure"})
        assert dry.status_code == 200, dry.text
        fields = fields_of(dry.text)
        assert sorted(f["run_id"] for f in fields) == sorted(held)
        assert all(f["tool"] == "pay_supplier" for f in fields)
        csrf = csrf_of(dry.text)
        yes, no = fields[:2], fields[2:]
        r = post(browser, csrf, {"action": "approve",
                                 "decisions": [signed(key, f, "approve", None) for f in yes]},
                 params={"flow": "procure"})
        assert r.status_code == 200 and r.json()["counts"]["done"] == 2, r.text
        r = post(browser, csrf, {"action": "reject",
                                 "decisions": [signed(key, f, "reject", None) for f in no]},
                 params={"flow": "procure"})
        assert r.status_code == 200 and r.json()["counts"]["done"] == 2, r.text
    world.drive()
    for f in yes:
        log = world.call("GET", f"/v1/runs/{f['run_id']}/events").json()
        assert [e["data"]["decision"]["approver_id"] for e in log
                if e["type"] == "ApprovalGranted"] == ["pat"]
    for f in no:
        log = world.call("GET", f"/v1/runs/{f['run_id']}/events").json()
        assert [e["type"] for e in log if e["type"].startswith("Approval")] == [
            "ApprovalRequested", "ApprovalRejected"]


def test_bulk_decisions_are_refused_without_csrf_or_an_approver_key(world: World) -> None:
    asking = start(world, "asking", {"sku": "A"}, 2)
    key = world.approver("acme", "pat", "support")
    with sign_in(world, role="approver") as browser:
        dry = browser.get("/approvals/bulk", params={"action": "answer",
                                                     "question": bulk_flows.QUESTION})
        decisions = [signed(key, f, "answer", "Pune") for f in fields_of(dry.text)]
        body = {"action": "answer", "question": bulk_flows.QUESTION, "answer": "Pune",
                "decisions": decisions}
        assert post(browser, None, body).status_code == 403
        assert post(browser, "not-the-token", body).status_code == 403
        unknown = post(browser, csrf_of(dry.text), {**body, "action": "resume"})
        assert unknown.status_code == 422 and "action" in unknown.json()["detail"]
        junk = post(browser, csrf_of(dry.text), {**body, "decisions": [{"run_id": 1}]})
        assert junk.status_code == 422
        assert "body.decisions.0: not a signed decision" in junk.json()["detail"]
        # The answer each decision carries must be the one the post names.
        other = post(browser, csrf_of(dry.text), {**body, "answer": "Delhi"})
        assert other.status_code == 200 and other.json()["counts"]["done"] == 0
    for role in ("operator", "viewer"):
        with sign_in(world, role=role) as browser:
            page = browser.get("/runs").text
            assert browser.get("/approvals/bulk", params={
                "action": "answer", "question": bulk_flows.QUESTION}).status_code == 403
            assert post(browser, csrf_of(page), body).status_code == 403
    assert all(world.store.pending_signals("acme", r) == [] for r in asking)
    world.drive()
    assert {world.store.get_run("acme", r).status for r in asking} == {  # type: ignore[union-attr]
        "escalated"}


def test_a_filter_without_a_question_lists_the_questions_its_runs_ask(world: World) -> None:
    start(world, "asking", {"sku": "A"}, 3)
    start(world, "lost", {"sku": "A"}, 1)  # escalated for a resolution: no question
    with sign_in(world, role="approver") as browser:
        runs = browser.get("/runs", params={"flow": "asking"}).text
        assert "/approvals/bulk?action=answer&amp;flow=asking" in runs
        page = browser.get("/approvals/bulk", params={"action": "answer", "flow": "asking"})
        assert page.status_code == 200
        assert f"{html.escape(bulk_flows.QUESTION)}</a>: 3 runs" in page.text
        every = browser.get("/approvals/bulk", params={"action": "answer"}).text
        listed = every.split('id="bulk-questions"', 1)[1].split("</section>", 1)[0]
        assert listed.count("<li>") == 1 and ": 3 runs" in listed


def test_a_page_signs_for_at_most_its_cap_and_says_how_many_fit(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    asking = start(world, "asking", {"sku": "A"}, 3)
    monkeypatch.setattr(_bulk_decide, "MAX_RUNS", 2)
    with sign_in(world, role="approver") as browser:
        page = browser.get("/approvals/bulk", params={"action": "answer",
                                                      "question": bulk_flows.QUESTION}).text
    assert re.search(r'data-count="eligible">3<', page)
    assert "3 runs fit: this page signs for the first 2." in page
    fields = fields_of(page)
    assert len(fields) == 2 and {f["run_id"] for f in fields} < set(asking)
