"""Run labels through the API on a real server (SQLite and PostgreSQL): a start body's typed
labels, the runs list filtered by ``label=name=value`` (several AND together) and showing
each run's labels, a sensitive label redacted unless the reader may reveal it, and bad
labels refused with a 422 naming the field, storing nothing."""

from __future__ import annotations

from typing import Any

from fakes.service_world import World

INPUT = {"invoice": "INV-1", "amount": 5}


def start(world: World, labels: dict[str, Any], **body: Any) -> str:
    r = world.call("POST", "/v1/runs", role="operator",
                   json={"flow": "reminders", "input": INPUT, "labels": labels, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def listed(world: World, *labels: str, tenant: str = "acme") -> list[str]:
    r = world.call("GET", "/v1/runs", tenant=tenant, role="viewer",
                   params=[("label", x) for x in labels])
    assert r.status_code == 200, r.text
    return [run["run_id"] for run in r.json()["runs"]]


def test_labels_set_at_start_are_typed_listed_and_filtered(world: World) -> None:
    a = start(world, {"sku": "A-7", "qty": 3, "rush": True, "weight": 2.5})
    b = start(world, {"sku": "B-1", "qty": 3})
    c = start(world, {"sku": "A-7", "qty": "3"})
    world.drive()
    runs = world.call("GET", "/v1/runs", role="viewer").json()["runs"]
    by_id = {r["run_id"]: r["labels"] for r in runs}
    assert by_id[a] == {"qty": 3, "rush": True, "sku": "A-7", "weight": 2.5}
    assert by_id[c] == {"qty": "3", "sku": "A-7"}
    assert sorted(listed(world, "sku=A-7")) == sorted([c, a])
    # A value matches by its text: the number 3 and the text "3" alike.
    assert sorted(listed(world, "qty=3")) == sorted([a, b, c])
    assert listed(world, "sku=A-7", "rush=true") == [a]
    assert listed(world, "sku=B-1", "rush=true") == []
    assert listed(world, "weight=2.5") == [a]
    # Another tenant's labels are not found.
    assert listed(world, "sku=A-7", tenant="globex") == []
    run = world.call("GET", f"/v1/runs/{a}", role="viewer").json()
    assert run["labels"]["sku"] == "A-7" and run["labels"]["qty"] == 3


def test_a_sensitive_label_is_redacted_unless_revealed(world: World) -> None:
    run_id = start(world, {"patient": "Asha Rao", "clinic": "Madurai"},
                   sensitive_labels=["patient"])
    world.drive()
    listed_runs = world.call("GET", "/v1/runs", role="viewer").json()["runs"]
    assert listed_runs[0]["labels"] == {"clinic": "Madurai", "patient": "[redacted]"}
    hidden = world.call("GET", f"/v1/runs/{run_id}", role="viewer")
    assert hidden.json()["labels"]["patient"] == "[redacted]"
    events = world.call("GET", f"/v1/runs/{run_id}/events", role="viewer").text
    assert "Asha Rao" not in events and "Asha Rao" not in hidden.text
    shown = world.call("GET", f"/v1/runs/{run_id}", role="admin",
                       params={"reveal": "true", "purpose": "care"})
    assert shown.status_code == 200, shown.text
    assert shown.json()["labels"]["patient"] == "Asha Rao"
    # Whoever already knows the value finds the run by it.
    assert listed(world, "patient=Asha Rao") == [run_id]


def test_bad_labels_are_refused_naming_the_field(world: World) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"labels": {"1sku": "A"}}, "body.labels.1sku"),
        ({"labels": {"sku": "x" * 201}}, "body.labels.sku"),
        ({"labels": {"sku": "a\nb"}}, "body.labels.sku"),
        ({"labels": {"qty": 2**63}}, "body.labels.qty"),
        ({"labels": {"sku": "A"}, "sensitive_labels": ["no way"]},
         "body.sensitive_labels.no way"),
    ]
    for body, field in cases:
        r = world.call("POST", "/v1/runs", role="operator",
                       json={"flow": "reminders", "input": INPUT, **body})
        assert r.status_code == 422, (body, r.text)
        assert field in {e["field"] for e in r.json()["errors"]}, (body, r.json())
    nested = world.call("POST", "/v1/runs", role="operator",
                        json={"flow": "reminders", "input": INPUT, "labels": {"sku": [1]}})
    assert nested.status_code == 422
    too_many = {f"k{i}": i for i in range(21)}
    r = world.call("POST", "/v1/runs", role="operator",
                   json={"flow": "reminders", "input": INPUT, "labels": too_many})
    assert r.status_code == 422
    assert world.call("GET", "/v1/runs", role="viewer").json()["runs"] == []
    for bad in ("sku", "1x=2", "=2"):
        r = world.call("GET", "/v1/runs", role="viewer", params={"label": bad})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "query.label"


def test_the_inbox_shows_each_runs_labels_a_sensitive_one_redacted(world: World) -> None:
    r = world.call("POST", "/v1/runs", role="operator", json={
        "flow": "refunds", "input": INPUT, "labels": {"sku": "A-7", "patient": "Asha Rao"},
        "sensitive_labels": ["patient"]})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    world.drive()  # the refund is held for a person
    inbox = world.call("GET", "/v1/approvals", role="viewer")
    assert inbox.status_code == 200, inbox.text
    [held] = inbox.json()
    assert held["run_id"] == run_id
    assert held["labels"] == {"patient": "[redacted]", "sku": "A-7"}
    one = world.call("GET", f"/v1/approvals/{run_id}", role="viewer").json()
    assert one["labels"] == held["labels"] and "Asha Rao" not in inbox.text
    shown = world.call("GET", f"/v1/approvals/{run_id}", role="admin",
                       params={"reveal": "true", "purpose": "care"})
    assert shown.status_code == 200, shown.text
    assert shown.json()["labels"]["patient"] == "Asha Rao"
