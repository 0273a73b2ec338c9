"""Runs through the API on a real server: start by flow name (201, and 200 for the same
Idempotency-Key), read a run and what it waits on, list with filters and cursor pages, its
events as JSON and as a live Server-Sent Events tail, and steer it: signal, cancel,
resume, resolve."""

from __future__ import annotations

import json
import threading

import httpx

from fakes.service_world import World


def test_a_start_with_an_idempotency_key_is_created_once(world: World) -> None:
    body = {"flow": "reminders", "input": {"invoice": "INV-1", "amount": 5}}
    first = world.call("POST", "/v1/runs", role="operator", json=body,
                       headers={"Idempotency-Key": "INV-1"})
    again = world.call("POST", "/v1/runs", role="operator", json=body,
                       headers={"Idempotency-Key": "INV-1"})
    assert first.status_code == 201 and again.status_code == 200
    assert first.json() == {"run_id": first.json()["run_id"], "created": True}
    assert again.json() == {"run_id": first.json()["run_id"], "created": False}


def test_a_run_shows_its_step_and_what_it_waits_on(world: World) -> None:
    run_id = world.start()
    run = world.call("GET", f"/v1/runs/{run_id}", role="viewer").json()
    assert (run["status"], run["step"], run["flow"]) == ("waiting", "settle", "reminders")
    assert run["waiting_on"]["kind"] == "signal" and run["waiting_on"]["signal"] == "paid"

    refund = world.start("refunds", "INV-2")
    waiting = world.call("GET", f"/v1/runs/{refund}").json()["waiting_on"]
    assert waiting["kind"] == "approval"
    assert waiting["request"]["tool"] == "refund"
    assert waiting["request"]["args"] == {"invoice": "INV-2", "amount": 5}


def test_listing_filters_and_pages(world: World) -> None:
    ids = [world.start(invoice=f"INV-{i}", drive=False) for i in range(3)]
    refund = world.start("refunds", "INV-9", drive=False)
    world.drive()
    page = world.call("GET", "/v1/runs", params={"limit": 2}).json()
    assert len(page["runs"]) == 2 and page["next_cursor"]
    rest = world.call("GET", "/v1/runs", params={"limit": 2, "cursor": page["next_cursor"]})
    seen = [r["run_id"] for r in page["runs"] + rest.json()["runs"]]
    assert sorted(seen) == sorted([*ids, refund]) and rest.json()["next_cursor"] is None
    by_flow = world.call("GET", "/v1/runs", params={"flow": "refunds"}).json()["runs"]
    assert [r["run_id"] for r in by_flow] == [refund]
    by_text = world.call("GET", "/v1/runs", params={"q": "fund"}).json()["runs"]
    assert [r["run_id"] for r in by_text] == [refund]
    by_id = world.call("GET", "/v1/runs", params={"q": ids[1][:13]}).json()["runs"]
    assert [r["run_id"] for r in by_id] == [ids[1]]
    waiting = world.call("GET", "/v1/runs", params={"status": "waiting"}).json()["runs"]
    assert len(waiting) == 4
    later = world.clock.now() + 1
    assert world.call("GET", "/v1/runs", params={"updated_since": later}).json()["runs"] == []
    assert len(world.call("GET", "/v1/runs",
                          params={"created_until": later}).json()["runs"]) == 4


def test_events_as_json_and_after_a_seq(world: World) -> None:
    run_id = world.start()
    events = world.call("GET", f"/v1/runs/{run_id}/events", role="viewer").json()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "RunStarted" and all(len(e["hash"]) == 64 for e in events)
    tail = world.call("GET", f"/v1/runs/{run_id}/events", params={"after": 2}).json()
    assert tail == events[2:]


def test_a_signal_wakes_the_run_and_the_live_tail_streams_it_to_the_end(world: World) -> None:
    run_id = world.start()
    before = len(world.call("GET", f"/v1/runs/{run_id}/events").json())
    received: list[tuple[str, str, dict[str, object]]] = []
    opened = threading.Event()

    def tail() -> None:
        with world.http.stream("GET", f"/v1/runs/{run_id}/events/stream",
                               headers={**world.headers(role="viewer"),
                                        "Last-Event-ID": str(before)}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            opened.set()
            fields: dict[str, str] = {}
            for line in r.iter_lines():
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                    continue
                if "event" in fields:
                    received.append((fields.get("id", ""), fields["event"],
                                     json.loads(fields["data"])))
                fields = {}

    reader = threading.Thread(target=tail)
    reader.start()
    assert opened.wait(30)
    sent = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                      json={"name": "paid", "payload": {"amount": 5}, "signal_id": "p1"})
    assert sent.status_code == 202 and sent.json()["delivered"] is True
    again = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                       json={"name": "paid", "signal_id": "p1"})
    assert again.json()["delivered"] is False
    world.drive()
    reader.join(60)
    assert not reader.is_alive()
    assert received[-1][1] == "end" and received[-1][2]["status"] == "completed"
    streamed = received[:-1]
    assert int(streamed[0][0]) == before + 1
    assert streamed[-1][1] == "RunCompleted"
    everything = world.call("GET", f"/v1/runs/{run_id}/events").json()
    assert [(str(e["seq"]), e["type"]) for e in everything[before:]] == [
        (i, t) for i, t, _ in streamed]


def test_an_undeclared_signal_is_refused_naming_the_field(world: World) -> None:
    run_id = world.start()
    r = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                   json={"name": "bogus"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.name"
    assert world.store.pending_signals("acme", run_id) == []


def test_cancel_is_journaled_with_the_keys_name(world: World) -> None:
    run_id = world.start()
    r = world.call("POST", f"/v1/runs/{run_id}/cancel", role="operator",
                   json={"reason": "duplicate"})
    assert r.status_code == 202
    world.drive()
    run = world.call("GET", f"/v1/runs/{run_id}").json()
    assert run["status"] == "cancelled" and run["waiting_on"] is None
    events = world.call("GET", f"/v1/runs/{run_id}/events").json()
    cancelled = [e for e in events if e["type"] == "RunCancelled"]
    assert cancelled and cancelled[0]["data"]["by"] == "apikey:acme-operator"
    again = world.call("POST", f"/v1/runs/{run_id}/cancel", role="operator", json={})
    assert again.status_code == 409
    assert again.json()["type"] == "urn:underway:problem:conflict"


def test_resume_and_resolve_need_a_dead_or_escalated_run(world: World) -> None:
    run_id = world.start()
    for action, body in (("resume", {}), ("resolve", {"resolution": "retry"})):
        r = world.call("POST", f"/v1/runs/{run_id}/{action}", role="operator", json=body)
        assert r.status_code == 409, r.text
        assert r.headers["content-type"] == "application/problem+json"
    assert world.store.pending_signals("acme", run_id) == []


def test_health_and_readiness_need_no_key(world: World) -> None:
    assert world.http.get("/healthz").json() == {"status": "ok", "schema_version": None}
    ready = world.http.get("/readyz").json()
    assert ready["status"] == "ready" and ready["schema_version"] >= 9
    assert world.http.get("/").status_code == 303  # the console, which asks to sign in
    metrics = world.http.get("/metrics")  # no key needed, like /healthz
    assert metrics.status_code == 200 and "underway_runs" in metrics.text
    spec = httpx.get(world.server.url + "/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
