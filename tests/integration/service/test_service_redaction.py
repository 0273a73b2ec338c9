"""Redaction through the API: a KYC run whose tools carry a PAN and a phone number in
sensitive fields and an API token typed as a secret (:mod:`fakes.sensitive_flows`). No
canary reaches a key that may not see it — in any read of the run, its events and their
live tail, the approvals inbox and request, the runs list, an error quoting a value, the
notices webhook and SMTP receive, or a log line — while the journal keeps them all (the
hash chain verifies). An admin asking ``reveal=true`` sees the sensitive fields, an
approver sees the exact arguments of the request it decides, and nobody sees the secret;
the access log records every read with its purpose and whether it revealed."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.parse import urlencode

import httpx
import pytest

from fakes.sensitive_flows import BAD_PAN, PAN, PHONE, SENSITIVE, TOKEN, leaks
from fakes.sensitive_world import KycRuns, kyc_runs, read_stream
from fakes.service_world import World
from underway import Client
from underway.errors import ConfigurationError
from underway.redaction import REDACTED
from underway.service import ServerThread, create_app


@pytest.fixture
def kyc(world: World, caplog: pytest.LogCaptureFixture) -> Iterator[KycRuns]:
    caplog.set_level(logging.DEBUG, logger="underway")
    runs = kyc_runs(world)
    yield runs
    runs.close()


def reads(kyc: KycRuns, **params: str) -> list[str]:
    """Every read of the runs' data a key can make, with ``params`` in its query."""
    paths = [p for run_id in (kyc.waiting, kyc.failed)
             for p in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events",
                       f"/v1/runs/{run_id}/events?after=5")]
    paths += ["/v1/approvals", f"/v1/approvals/{kyc.waiting}"]
    query = urlencode(params)
    return [p + ("&" if "?" in p else "?") + query if query else p for p in paths]


def test_no_canary_reaches_a_key_that_may_not_see_it(kyc: KycRuns,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    w = kyc.world
    for role in ("viewer", "operator", "approver", "admin"):
        for path in reads(kyc):
            r = w.call("GET", path, role=role)
            assert r.status_code == 200, (path, r.text)
            assert leaks(r.text) == [], (role, path)
        listed = w.call("GET", "/v1/runs", role=role)
        assert leaks(listed.text) == [] and "failed" in listed.text
        head = w.store.get_run("acme", kyc.waiting)
        assert head is not None
        tail = read_stream(w.http, f"/v1/runs/{kyc.waiting}/events/stream",
                           last_seq=head.last_seq, headers=w.headers(role=role))
        assert f"id: {head.last_seq}" in tail and leaks(tail) == [], role
    # The shape stays: the field is there, its value redacted; the hash is of the exact args.
    events = w.call("GET", f"/v1/runs/{kyc.waiting}/events", role="viewer").json()
    asked = next(e for e in events if e["type"] == "ApprovalRequested")["data"]
    assert asked["args"] == {"phone": REDACTED, "message": "KYC done", "api_token": REDACTED}
    assert asked["evidence"] == {"pan": REDACTED, "why": "KYC complete"}
    assert (asked["sensitive_fields"], asked["secret_fields"]) == (["phone"], ["api_token"])
    found = next(e for e in events if e["type"] == "ToolSucceeded")["data"]["result"]
    assert found == {"name": "Asha", "phone": REDACTED}
    failed = w.call("GET", f"/v1/runs/{kyc.failed}", role="viewer").json()
    assert failed["status"] == "dead" and "PAN [redacted] failed" in failed["error"]
    # Notices left for outside channels redacted, for everyone.
    for _, body in kyc.webhook.received:
        notice = json.loads(body)
        assert leaks(body.decode()) == [] and notice["args"]["phone"] == REDACTED
    for _, _, message in kyc.smtp.messages:
        text = message.as_string()
        assert leaks(text) == [] and "send_sms" in text and REDACTED in text
    # No log line of the run carried one.
    for record in caplog.records:
        assert leaks(record.getMessage() + (record.exc_text or "")) == [], record.getMessage()
    # The journal itself is untouched: it holds every value, and its chains verify.
    journal = json.dumps([e.event.model_dump(mode="json")
                          for e in Client(w.store).events(kyc.waiting, tenant_id="acme")])
    assert set(leaks(journal)) == {PAN, BAD_PAN, PHONE, TOKEN}
    assert w.call("GET", "/v1/audit/verify", role="viewer").json()["ok"] is True


def test_the_completed_run_hides_what_its_state_and_result_copied(kyc: KycRuns) -> None:
    kyc.approve()
    w = kyc.world
    row = w.store.get_run("acme", kyc.waiting)
    assert row is not None and row.status == "completed"
    for path in (f"/v1/runs/{kyc.waiting}", f"/v1/runs/{kyc.waiting}/events"):
        assert leaks(w.call("GET", path, role="viewer").text) == []
    tail = read_stream(w.http, f"/v1/runs/{kyc.waiting}/events/stream",
                       headers=w.headers(role="viewer"))
    assert "event: end" in tail and leaks(tail) == []
    events = w.call("GET", f"/v1/runs/{kyc.waiting}/events", role="viewer").json()
    done = next(e for e in events if e["type"] == "RunCompleted")["data"]["result"]
    assert done == {"sent": "m-1", "to": REDACTED}
    revealed = w.call("GET", f"/v1/runs/{kyc.waiting}/events", role="admin",
                      params={"reveal": "true"}).json()
    assert next(e for e in revealed if e["type"] == "RunCompleted")["data"]["result"] == {
        "sent": "m-1", "to": PHONE}


def test_an_admin_who_asks_sees_the_sensitive_fields_never_the_secret(kyc: KycRuns) -> None:
    w = kyc.world
    for path in reads(kyc, reveal="true", purpose="kyc review"):
        r = w.call("GET", path, role="admin")
        assert r.status_code == 200, (path, r.text)
        assert TOKEN not in r.text, path
    events = w.call("GET", f"/v1/runs/{kyc.waiting}/events", role="admin",
                    params={"reveal": "true"}).text
    assert set(leaks(events)) == set(SENSITIVE)
    head = w.store.get_run("acme", kyc.waiting)
    assert head is not None
    tail = read_stream(w.http, f"/v1/runs/{kyc.waiting}/events/stream?reveal=true",
                       last_seq=head.last_seq, headers=w.headers(role="admin"))
    assert set(leaks(tail)) == set(SENSITIVE)
    asked = next(e for e in json.loads(events) if e["type"] == "ApprovalRequested")["data"]
    assert asked["args"]["api_token"] == REDACTED and asked["args"]["phone"] == PHONE
    entries = w.store.list_access("acme", who="acme-admin", purpose="kyc review", limit=1000)
    assert len(entries) == len(reads(kyc)) and all(e.revealed for e in entries)


def test_an_approver_sees_the_exact_arguments_it_decides_and_nothing_else(
    kyc: KycRuns,
) -> None:
    w = kyc.world
    detail = w.call("GET", f"/v1/approvals/{kyc.waiting}", role="approver",
                    params={"reveal": "true", "purpose": "deciding"})
    assert detail.status_code == 200
    args = detail.json()["args"]
    assert args == {"phone": PHONE, "message": "KYC done", "api_token": REDACTED}
    assert detail.json()["evidence"]["pan"] == PAN
    [entry] = w.store.list_access("acme", who="acme-approver")
    assert (entry.run_id, entry.purpose, entry.revealed) == (kyc.waiting, "deciding", True)
    for path in (f"/v1/runs/{kyc.waiting}/events", f"/v1/runs/{kyc.waiting}",
                 f"/v1/runs/{kyc.waiting}/events/stream", "/v1/approvals"):
        r = w.call("GET", path, role="approver", params={"reveal": "true"})
        assert r.status_code == 403, path
        assert "reveal_roles" in r.json()["detail"] and leaks(r.text) == []
    assert len(w.store.list_access("acme", who="acme-approver")) == 1


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_a_role_that_may_not_reveal_is_refused_and_nothing_is_logged(kyc: KycRuns,
                                                                     role: str) -> None:
    w = kyc.world
    for path in reads(kyc, reveal="true"):
        r = w.call("GET", path, role=role)
        assert r.status_code == 403 and r.json()["type"].endswith("forbidden"), path
        assert leaks(r.text) == []
    assert w.store.list_access("acme", who=f"acme-{role}") == []


def test_reveal_roles_are_the_deployments_choice(kyc: KycRuns) -> None:
    w = kyc.world
    app = create_app(Client(w.store, clock=w.clock), reveal_roles=["operator"])
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
        def reveal(role: str) -> httpx.Response:
            return http.get(f"/v1/runs/{kyc.waiting}/events", params={"reveal": "true"},
                            headers=w.headers(role=role))
        assert reveal("operator").status_code == 200 and PHONE in reveal("operator").text
        assert reveal("admin").status_code == 403
    with pytest.raises(ConfigurationError, match="unknown roles"):
        create_app(Client(w.store), reveal_roles=["auditor"])


@pytest.mark.parametrize(("purpose", "problem"), [
    ("", "must not be empty"), ("   ", "must not be empty"), ("x" * 101, "at most 100"),
    ("audit\nforged line", "control characters"),
])
def test_a_bad_purpose_is_refused_naming_it(kyc: KycRuns, purpose: str, problem: str) -> None:
    w = kyc.world
    before = len(w.store.list_access("acme", limit=1000))
    r = w.call("GET", f"/v1/runs/{kyc.waiting}", role="viewer", params={"purpose": purpose})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "query.purpose" and problem in r.text
    assert len(w.store.list_access("acme", limit=1000)) == before


def test_the_purpose_and_the_chain_are_in_the_access_log(kyc: KycRuns) -> None:
    w = kyc.world
    w.call("GET", f"/v1/runs/{kyc.waiting}", role="viewer",
           params={"purpose": "customer complaint #42"})
    w.call("GET", "/v1/usage", role="viewer", params={"purpose": "billing"})
    page = w.call("GET", "/v1/access-log", params={"purpose": "customer complaint #42"}).json()
    [entry] = page["entries"]
    assert (entry["run_id"], entry["key_name"], entry["revealed"]) == (
        kyc.waiting, "acme-viewer", False)
    assert len(entry["hash"]) == 64 and len(entry["prev_hash"]) == 64
    usage = w.call("GET", "/v1/access-log", params={"by": "acme-viewer",
                                                    "purpose": "billing"}).json()["entries"]
    assert [(e["run_id"], e["endpoint"]) for e in usage] == [("*", "GET /v1/usage")]
    check = w.call("GET", "/v1/access-log/verify").json()
    assert check["ok"] is True and check["entries"] >= 2 and check["bad_seq"] is None
    assert w.call("GET", "/v1/access-log/verify", role="viewer").status_code == 403
