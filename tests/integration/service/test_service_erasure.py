"""Erasure through the API on a real server: admins only; a run of the subject still
waiting makes it a 409 that names the run and destroys nothing, ``cancel_active`` asks it
to cancel and the erasure goes through once a worker has ended it; the subject's runs keep
their skeleton; the erasure log is listed by subject; tenants do not see each other's."""

from __future__ import annotations

from fakes.service_world import World

INVOICE = {"invoice": "INV-7", "amount": 5}


def _start(world: World, subject: str, tenant: str = "acme") -> str:
    r = world.call("POST", "/v1/runs", tenant=tenant, role="operator",
                   json={"flow": "reminders", "input": INVOICE, "subject": subject})
    assert r.status_code == 201, r.text
    world.drive()
    return str(r.json()["run_id"])


def test_an_admin_erases_a_subject_once_its_runs_have_ended(world: World) -> None:
    run_id = _start(world, "cust-7")
    other = _start(world, "cust-7", tenant="globex")
    body = {"subject": "cust-7", "reason": "DPDP request 12"}
    for role in ("viewer", "operator", "approver"):
        r = world.call("POST", "/v1/erasures", role=role, json=body)
        assert r.status_code == 403, (role, r.text)
    r = world.call("POST", "/v1/erasures", json=body)
    assert r.status_code == 409 and run_id in r.json()["detail"], r.text
    assert "still active" in r.json()["detail"]
    r = world.call("POST", "/v1/erasures", json=body | {"cancel_active": True})
    assert r.status_code == 409 and "had not ended" in r.json()["detail"], r.text
    world.clock.advance(60.0)  # the cancel was sent on the system's clock
    world.drive()  # a worker ends the cancelled run
    r = world.call("POST", "/v1/erasures", json=body)
    assert r.status_code == 201, r.text
    entry = r.json()
    assert (entry["subject"], entry["by"], entry["runs"], entry["reason"]) == (
        "cust-7", "apikey:acme-admin", 1, "DPDP request 12")
    assert entry["vault"] == "none"  # a plaintext database: backups are not reached
    events = world.call("GET", f"/v1/runs/{run_id}/events", role="viewer").json()
    assert events and all(e["purged"] for e in events)
    assert "INV-7" not in str(events)
    listed = world.call("GET", "/v1/erasures", params={"subject": "cust-7"}).json()
    assert [e["seq"] for e in listed] == [entry["seq"]]
    assert world.call("GET", "/v1/erasures", tenant="globex").json() == []
    assert world.call("GET", "/v1/erasures", role="viewer").status_code == 403
    theirs = world.call("GET", f"/v1/runs/{other}/events", tenant="globex",
                        role="viewer").json()
    assert "INV-7" in str(theirs)  # another tenant's subject of the same id is untouched


def test_a_bad_erasure_request_is_refused_naming_the_field(world: World) -> None:
    for body, field in (({"subject": "cust 7", "reason": "r"}, "body.subject"),
                        ({"subject": "cust-7", "reason": ""}, "body.reason"),
                        ({"subject": "cust-7"}, "body.reason"),
                        ({"subject": "cust-7", "reason": "r", "extra": 1}, "body.extra")):
        r = world.call("POST", "/v1/erasures", json=body)
        assert r.status_code == 422, r.text
        assert [e["field"] for e in r.json()["errors"]] == [field]
    assert world.store.list_erasures() == []
