"""The run page while the run moves, and what an operator does from it: the page's event
stream (the session's cookie, no key) sends each new event as a timeline entry, the run's
status as it changes and the end; cancel, signal, resume and resolve are forms with the
CSRF token, for operators and admins only — hidden from a viewer and refused if posted."""

from __future__ import annotations

import html
import json
import re
import threading
from typing import Any

import httpx
import pytest

from fakes.console_browser import csrf_of, sign_in
from fakes.journey_flows import drive, journey_to_the_question, start
from fakes.service_world import World
from underway import Client


def _read_stream(world: World, browser: httpx.Client, path: str, opened: threading.Event,
                 received: list[tuple[str, str, Any]]) -> None:
    """Read the stream at ``path`` into ``received`` (id, event, data) until it ends;
    ``opened`` is set once the first status arrives (the server is tailing)."""
    with httpx.Client(base_url=world.server.url, cookies=browser.cookies,
                      timeout=60.0) as reader, reader.stream("GET", path) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "data" in fields:
                kind = fields.get("event", "message")
                received.append((fields.get("id", ""), kind, json.loads(fields["data"])))
                if kind == "status":
                    opened.set()
            fields = {}


def test_the_page_streams_new_events_as_the_run_moves(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    received: list[tuple[str, str, Any]] = []
    opened = threading.Event()
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{run_id}").text
        found = re.search(r'data-stream="([^"]+)"', page)
        assert found and 'id="live"' in page
        stream = html.unescape(found.group(1))
        before = int(stream.rsplit("after=", 1)[1])
        assert before == len(Client(world.store).history(run_id, tenant_id="acme"))
        reader = threading.Thread(target=_read_stream,
                                  args=(world, browser, stream, opened, received))
        reader.start()
        assert opened.wait(30)
        sent = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                          json={"name": "paid", "payload": {"note": "<b>paid</b>"}})
        assert sent.status_code == 202
        world.drive()
        reader.join(60)
        assert not reader.is_alive()
        done = browser.get(f"/runs/{run_id}").text
    assert received[0][1] == "status" and received[0][2]["status"] == "waiting"
    # The stream says what the run waits on in words, beside the signal's machine name.
    assert (received[0][2]["signal"], received[0][2]["waiting"]) == ("paid", "signal paid")
    assert received[-1][1] == "end" and received[-1][2]["status"] == "completed"
    events = [(i, d) for i, kind, d in received if kind == "message"]
    journal = Client(world.store).history(run_id, tenant_id="acme")
    assert [int(i) for i, _ in events] == [r.seq for r in journal[before:]]
    assert [d["type"] for _, d in events] == [type(r.event).__name__ for r in journal[before:]]
    assert events[-1][1]["type"] == "RunCompleted"
    for i, d in events:  # each a timeline entry, as the page itself shows it
        assert '<li class="event fam-' in d["html"] and f'id="e-{i}"' in d["html"]
        assert d["html"].strip() in done
    signal = next(d["html"] for _, d in events if d["type"] == "SignalReceived")
    assert "<b>paid" not in signal and "&lt;b&gt;paid&lt;/b&gt;" in signal
    assert 'id="live"' not in done and "data-stream=\"\"" in done


def test_the_stream_goes_on_after_the_last_event_id(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    world.call("POST", f"/v1/runs/{run_id}/signals", role="operator", json={"name": "paid"})
    world.drive()
    with sign_in(world) as browser:
        r = browser.get(f"/runs/{run_id}/events/stream", headers={"Last-Event-ID": "5"})
    ids = re.findall(r"^id: (\d+)$", r.text, re.M)
    head = len(Client(world.store).history(run_id, tenant_id="acme"))
    assert ids == [str(s) for s in range(6, head + 1)]
    assert r.text.rstrip().endswith(f'data: {{"status": "completed", "seq": {head}}}')


def test_a_viewer_sees_no_steering_and_is_refused_if_it_posts(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    with sign_in(world, role="viewer") as browser:
        page = browser.get(f"/runs/{run_id}").text
        assert 'id="steer"' not in page and "/cancel" not in page
        csrf = csrf_of(page)
        for action, form in (("cancel", {}), ("signal", {"name": "paid"}),
                             ("resume", {}), ("resolve", {"resolution": "failed"})):
            r = browser.post(f"/runs/{run_id}/{action}", data={"csrf": csrf, **form})
            assert r.status_code == 403, action
    assert world.store.pending_signals("acme", run_id) == []
    assert world.store.get_run("acme", run_id).status == "waiting"  # type: ignore[union-attr]


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_an_operator_signals_with_a_json_payload(world: World, role: str) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    with sign_in(world, role=role) as browser:
        page = browser.get(f"/runs/{run_id}").text
        assert 'id="steer"' in page and '<option value="paid">' in page
        csrf = csrf_of(page)
        bad = browser.post(f"/runs/{run_id}/signal",
                           data={"csrf": csrf, "name": "paid", "payload": "{nope"})
        assert bad.status_code == 422 and "not JSON" in bad.text
        undeclared = browser.post(f"/runs/{run_id}/signal",
                                  data={"csrf": csrf, "name": "bogus", "payload": "1"})
        assert undeclared.status_code == 422
        assert world.store.pending_signals("acme", run_id) == []
        form = {"csrf": csrf, "name": "paid", "payload": '{"amount": 120}', "signal_id": "s1"}
        r = browser.post(f"/runs/{run_id}/signal", data=form)
        assert r.status_code == 303 and r.headers["location"] == f"/runs/{run_id}?done=signal"
        again = browser.post(f"/runs/{run_id}/signal", data=form)
        assert again.headers["location"].endswith("done=signal-duplicate")
        assert "Signal sent." in browser.get(r.headers["location"]).text
    world.drive()
    state = Client(world.store).state(run_id, tenant_id="acme")
    assert state.status == "completed" and state.result == {"paid": {"amount": 120}}
    received = [r.event for r in Client(world.store).history(run_id, tenant_id="acme")
                if type(r.event).__name__ == "SignalReceived"]
    assert [e.sender for e in received] == [f"apikey:acme-{role}"]  # type: ignore[attr-defined]


def test_an_operator_cancels_and_the_checks_of_the_api_hold(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    with sign_in(world, role="operator") as browser:
        csrf = csrf_of(browser.get(f"/runs/{run_id}").text)
        assert browser.post(f"/runs/{run_id}/cancel", data={"reason": "x"}).status_code == 403
        assert browser.post(f"/runs/{run_id}/cancel", data={"csrf": csrf},
                            headers={"Origin": "https://evil.example"}).status_code == 403
        assert browser.post(f"/runs/{run_id}/resume", data={"csrf": csrf}).status_code == 409
        assert browser.post(f"/runs/{run_id}/resolve",
                            data={"csrf": csrf, "resolution": "failed"}).status_code == 409
        assert browser.post("/runs/nope/cancel", data={"csrf": csrf}).status_code == 404
        r = browser.post(f"/runs/{run_id}/cancel", data={"csrf": csrf, "reason": "duplicate"})
        assert r.status_code == 303
        world.drive()
        page = browser.get(f"/runs/{run_id}").text
        assert "nothing to steer" in page
        again = browser.post(f"/runs/{run_id}/cancel", data={"csrf": csrf})
        assert again.status_code == 409 and "already cancelled" in again.text
    state = Client(world.store).state(run_id, tenant_id="acme")
    assert state.status == "cancelled" and "duplicate" in (state.error or "")
    with sign_in(world, tenant="globex", role="operator") as other:
        csrf = csrf_of(other.get("/runs").text)
        assert other.post(f"/runs/{run_id}/signal",
                          data={"csrf": csrf, "name": "paid"}).status_code == 404


def test_an_operator_resolves_an_escalated_run(world: World) -> None:
    run_id = journey_to_the_question(world)
    with sign_in(world, role="operator") as browser:
        page = browser.get(f"/runs/{run_id}").text
        assert f'action="/runs/{run_id}/resolve"' in page
        csrf = csrf_of(page)
        r = browser.post(f"/runs/{run_id}/resolve", data={"csrf": csrf, "resolution": "x"})
        assert r.status_code == 422
        r = browser.post(f"/runs/{run_id}/resolve", data={"csrf": csrf, "resolution": "failed"})
        assert r.status_code == 303 and r.headers["location"].endswith("done=resolve")
    drive(world)
    history = Client(world.store).history(run_id, tenant_id="acme")
    assert any(type(r.event).__name__ == "EscalationResolved" for r in history)
