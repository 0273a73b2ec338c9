"""A run purged by retention, read through ``underway serve``: the API's run, events, live
tail and usage, and the console's run page and state view show the skeleton, marked
purged, and never a canary; nothing fails."""

from __future__ import annotations

import html
import json
import re

from fakes.console_browser import sign_in
from fakes.retention_world import CANARIES, DAY, make_runs
from fakes.service_world import World
from underway.privacy.retention import Retention, sweep


def purged_runs(world: World) -> dict[str, str]:
    runs = make_runs(world.store, tenant="acme")
    report = sweep(world.store, Retention(completed=DAY, failed=DAY), tenant_id="acme")
    assert report.purged == 3
    return runs


def no_canary(text: str) -> None:
    assert [c for c in CANARIES if c in text] == []


def test_the_api_shows_a_purged_run_as_its_skeleton(world: World) -> None:
    runs = purged_runs(world)
    rid = runs["letter"]
    row = world.call("GET", f"/v1/runs/{rid}", role="viewer")
    assert row.status_code == 200 and row.json()["status"] == "completed"
    failed = world.call("GET", f"/v1/runs/{runs['doomed']}", role="viewer")
    assert failed.json()["status"] == "failed" and failed.json()["error"] is None
    events = world.call("GET", f"/v1/runs/{rid}/events", role="viewer")
    assert events.status_code == 200
    found = events.json()
    assert [e["type"] for e in found][:2] == ["RunStarted", "StepStarted"]
    assert all(e["purged"] for e in found) and found[0]["data"]["flow"] == "letter"
    no_canary(events.text)
    tail = world.call("GET", f"/v1/runs/{rid}/events/stream", role="viewer")
    assert tail.status_code == 200 and "event: end" in tail.text
    assert '"purged":true' in tail.text
    no_canary(tail.text)
    usage = world.call("GET", "/v1/usage", role="viewer", params={"since": 0})
    assert usage.status_code == 200 and usage.json()["model_calls"] == 2
    # The live run is read as it always was.
    live = world.call("GET", f"/v1/runs/{runs['waiting']}/events", role="viewer")
    assert not any(e["purged"] for e in live.json()) and CANARIES[0] in live.text


def test_the_console_shows_a_purged_run_as_its_skeleton(world: World) -> None:
    rid = purged_runs(world)["letter"]
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{rid}")
        picked = browser.get(f"/runs/{rid}", params={"at": 4})
        state = browser.get(f"/runs/{rid}/state", params={"at": 4})
    assert page.status_code == 200 and picked.status_code == 200
    text = html.unescape(re.sub(r"<[^>]+>", " ", page.text))
    assert "[purged]" in text and "ToolSucceeded" in text and "send_letter" in text
    no_canary(page.text)
    no_canary(picked.text)
    assert state.status_code == 200
    shown = json.loads(state.text)
    assert shown["type"] == "ToolSucceeded" and shown["state"]["purged"] is True
    no_canary(state.text)
