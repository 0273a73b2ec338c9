"""The approvals pages over plain HTTP (the browser's part is in test_console_browser.py):
the inbox and a request show what a person needs to decide, reads are written to the access
log, only an approver key may post a decision (with the CSRF token, from this origin) and it
takes the API's path, only an admin registers approvers, and no page carries inline script
or style."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

from fakes.console_browser import csrf_of, sign_in
from fakes.service_world import World
from underway.guard.approvals import generate_keypair, sign_decision
from underway.service.console._approvals import time_left


def signed(world: World, run_id: str, key: Any, approver: str = "alice",
           **changes: Any) -> dict[str, Any]:
    [pending] = world.client_pending(run_id)
    fields: dict[str, Any] = {
        "request_id": pending["request_id"], "run_id": run_id, "tenant_id": "acme",
        "tool": pending["tool"], "args_hash": pending["args_hash"], "decision": "approve",
        "expires_at": pending["expires_at"], "approver_id": approver}
    fields.update(changes)
    return sign_decision(key, **fields).model_dump(mode="json")


def post_decision(browser: httpx.Client, run_id: str, body: Any, *,
                  csrf: str | None = None) -> httpx.Response:
    token = csrf if csrf is not None else csrf_of(browser.get(f"/approvals/{run_id}").text)
    return browser.post(f"/approvals/{run_id}/decision", json=body,
                        headers={"X-CSRF-Token": token})


def test_the_inbox_and_a_request_show_what_is_to_be_decided(world: World) -> None:
    refund = world.start("refunds", "INV-2")
    waiting = world.start(invoice="INV-1")
    [pending] = world.client_pending(refund)
    with sign_in(world, role="viewer") as browser:
        page = browser.get("/approvals").text
        row = re.search(rf'<tr data-run="{refund}">(.*?)</tr>', page, re.S)
        assert row is not None, page
        assert "refund" in row.group(1) and "finance" in row.group(1)
        assert "in 60m" in row.group(1)
        assert waiting not in page  # waits for a signal, not for a person

        page = browser.get(f"/approvals/{refund}").text
        for shown in (pending["args_hash"], pending["request_id"], "&#34;invoice&#34;: "
                      "&#34;INV-2&#34;", "&#34;paid_twice&#34;: true",
                      "money leaves the company", "a refund cannot be undone",
                      "<code>refunds</code> · version v1", ">finance<", "in 60m"):
            assert shown in page, shown
        assert 'id="read-only"' in page and 'id="approve"' not in page
        assert 'id="decision-fields"' not in page

        page = browser.get(f"/approvals/{waiting}").text
        assert "waits for no decision" in page and "waiting" in page
        r = browser.get("/approvals/no-such-run")
        assert r.status_code == 404 and "Not found" in r.text
        status = browser.get(f"/approvals/{refund}/status").json()
        assert status == {"run_id": refund, "status": "waiting", "step": "pay_back"}
        assert browser.get("/approvals/no-such-run/status").status_code == 404

    # Reads of a run's data are logged as the API's are; a run that waits for no one
    # shows no data.
    log = world.call("GET", "/v1/access-log", params={"run_id": refund}).json()["entries"]
    console = [e for e in log if not e["endpoint"].startswith("GET /v1/")]
    assert sorted(e["endpoint"] for e in console) == ["GET /approvals",
                                                      "GET /approvals/{run_id}"]
    assert {e["key_name"] for e in console} == {"acme-viewer"}
    assert world.call("GET", "/v1/access-log",
                      params={"run_id": waiting}).json()["entries"] == []


def test_an_approvers_page_carries_the_fields_to_sign_and_no_inline_script(
        world: World) -> None:
    refund = world.start("refunds", "INV-2")
    [pending] = world.client_pending(refund)
    with sign_in(world, role="approver") as browser:
        for path in ("/approvals", f"/approvals/{refund}"):
            page = browser.get(path)
            assert "script-src 'self'" in page.headers["content-security-policy"]
            scripts = re.findall(r"<script([^>]*)>", page.text)
            assert scripts and all('src="/static/' in s or 'type="application/json"' in s
                                   for s in scripts), scripts
            assert not re.search(r"\sstyle=|\son[a-z]+=", page.text)
            assert 'id="key-panel"' in page.text
        fields = re.search(r'<script type="application/json" id="decision-fields">(.*?)'
                           r"</script>", page.text, re.S)
        assert fields is not None
        data = json.loads(fields.group(1))
        assert data == {"request_id": pending["request_id"], "run_id": refund,
                        "tenant_id": "acme", "tool": "refund",
                        "args_hash": pending["args_hash"],
                        "expires_at": pending["expires_at"], "kind": "approval",
                        "dead": False}
        # The float is written so that it reads back as the same double: the browser signs it as
        # JCS writes that double.
        assert f'"expires_at": {pending["expires_at"]!r}' in fields.group(1)
        for name in ("jcs.js", "signing.js", "approvals.js", "approvals.css"):
            assert browser.get(f"/static/{name}").status_code == 200


def test_only_an_approver_posts_a_decision_with_the_csrf_token_and_it_takes_the_api_path(
        world: World) -> None:
    refund = world.start("refunds", "INV-2")
    alice = world.approver("acme", "alice", "finance")
    good = signed(world, refund, alice)
    for role in ("viewer", "operator", "admin"):
        with sign_in(world, role=role) as browser:
            r = post_decision(browser, refund, good)
            assert r.status_code == 403, (role, r.text)
    with sign_in(world, role="approver") as browser:
        assert post_decision(browser, refund, good, csrf="forged").status_code == 403
        assert browser.post(f"/approvals/{refund}/decision", json=good).status_code == 403
        token = csrf_of(browser.get("/approvals").text)
        r = browser.post(f"/approvals/{refund}/decision", json=good,
                         headers={"X-CSRF-Token": token, "Origin": "https://evil.example"})
        assert r.status_code == 403
        assert world.store.pending_signals("acme", refund) == []

        forged = {**good, "comment": "changed"}
        r = post_decision(browser, refund, forged)
        assert r.status_code == 422 and "signature" in r.json()["detail"]
        r = post_decision(browser, refund, signed(world, refund, alice, args_hash="0" * 64))
        assert r.status_code == 422 and "(args_mismatch)" in r.json()["detail"]
        r = post_decision(browser, refund, {**good, "extra": 1})
        assert r.status_code == 422 and "extra" in r.json()["detail"]
        r = browser.post(f"/approvals/{refund}/decision", content=b"{not json",
                         headers={"X-CSRF-Token": token})
        assert r.status_code == 400  # as on the API: a body that is not JSON
        r = post_decision(browser, "no-such-run", good, csrf=token)
        assert r.status_code == 404
        assert world.store.pending_signals("acme", refund) == []

        r = post_decision(browser, refund, good)
        assert r.status_code == 202 and r.json()["delivered"] is True
        r = post_decision(browser, refund, good)
        assert r.status_code == 202 and r.json()["delivered"] is False
    world.drive()
    assert world.call("GET", f"/v1/runs/{refund}").json()["status"] == "completed"


def test_only_an_admin_registers_approvers_as_the_api_does(world: World) -> None:
    _, public_key = generate_keypair()
    form = {"approver_id": "alice", "public_key": public_key, "roles": "finance, audit"}
    for role in ("viewer", "approver", "operator"):
        with sign_in(world, role=role) as browser:
            assert browser.get("/approvers").status_code == 403
            token = csrf_of(browser.get("/approvals").text)
            assert browser.post("/approvers", data={**form, "csrf": token}).status_code == 403
    with sign_in(world, role="admin") as browser:
        page = browser.get("/approvers")
        assert page.status_code == 200 and "No approvers yet" in page.text
        token = csrf_of(page.text)
        assert browser.post("/approvers", data=form).status_code == 403
        r = browser.post("/approvers", data={**form, "public_key": "not-a-key", "csrf": token})
        assert r.status_code == 422 and "not valid base64" in r.text
        r = browser.post("/approvers", data={**form, "roles": " ", "csrf": token})
        assert r.status_code == 422
        r = browser.post("/approvers", data={**form, "approver_id": "a b", "csrf": token})
        assert r.status_code == 422 and "no spaces" in r.text
        assert world.store.list_approvers("acme") == []
        r = browser.post("/approvers", data={**form, "csrf": token})
        assert r.status_code == 200 and 'id="registered"' in r.text
    [approver] = world.call("GET", "/v1/approvers").json()
    assert (approver["approver_id"], approver["public_key"], approver["roles"]) == (
        "alice", public_key, ["finance", "audit"])


@pytest.mark.parametrize("role", ["approver", "admin"])
def test_a_browser_asks_whether_its_key_is_registered(world: World, role: str) -> None:
    _, public_key = generate_keypair()
    _, other_key = generate_keypair()
    with sign_in(world, role=role) as browser:
        def status(key: str) -> str:
            found: str = browser.get("/approvers/alice/status",
                                     params={"public_key": key}).json()["status"]
            return found

        assert status(public_key) == "unregistered"
        world.call("POST", "/v1/approvers", json={"approver_id": "alice",
                                                  "public_key": public_key,
                                                  "roles": ["finance"]})
        assert status(public_key) == "registered"
        assert browser.get("/approvers/alice/status", params={
            "public_key": public_key}).json()["roles"] == ["finance"]
        assert status(other_key) == "other_key"
        world.call("DELETE", "/v1/approvers/alice")
        assert status(public_key) == "revoked"
    with sign_in(world, role="viewer") as browser:
        assert browser.get("/approvers/alice/status").status_code == 403


def test_time_left_reads_like_the_cli() -> None:
    now = time.time()
    assert time_left(now + 3600, now) == "in 60m"
    assert time_left(now + 30, now) == "in 30s"
    assert time_left(now + 5 * 3600, now) == "in 5.0h"
    assert time_left(now + 3 * 86400, now) == "in 3.0d"
    assert time_left(now - 10, now) == "expired 10s ago"
    assert time_left(float("inf"), now) == "no expiry"
