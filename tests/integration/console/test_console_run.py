"""A run's page: every kind of event on its timeline, readable and with its details; the
facts (flow, status, what it waits on, idempotency key, children, the pending request);
the state after any event and the patch it made, equal to the fold of the journal up to
it, from the checkpoint or without; pages that hold every event exactly once; values shown
as text; another tenant's run a 404 like a missing one; every read in the access log."""

from __future__ import annotations

import html
import json
import re
import threading

import httpx

from fakes.console_browser import sign_in
from fakes.journey_flows import (
    GATE,
    MARKUP,
    MODEL,
    drive,
    journey_to_the_question,
    start,
)
from fakes.service_world import World
from underway import Client
from underway.journal.patch import make_patch
from underway.journal.state import RunState, fold

PAGE = 200


def _kinds(page: str) -> list[tuple[int, str, str]]:
    """(seq, type, summary) of each timeline entry of a page, unescaped."""
    found = re.findall(r'id="e-(\d+)".*?<span class="kind">(\w+)</span>\s*'
                       r'<span class="summary">([^<]*)</span>', page, re.S)
    return [(int(s), t, html.unescape(x)) for s, t, x in found]


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _folded(world: World, run_id: str, n: int) -> dict[str, object]:
    history = Client(world.store).history(run_id, tenant_id="acme")
    state = fold(history[:n], start=RunState(tenant_id="acme", run_id=run_id))
    found: dict[str, object] = json.loads(json.dumps(state.to_json()))
    return found


def test_the_timeline_shows_every_kind_of_event_and_the_facts(world: World) -> None:
    run_id = journey_to_the_question(world)
    with sign_in(world) as browser:
        r = browser.get(f"/runs/{run_id}")
    assert r.status_code == 200
    entries = _kinds(r.text)
    assert [s for s, _, _ in entries] == list(range(1, len(entries) + 1))
    summary = {t: x for _, t, x in entries}
    assert {"RunStarted", "InputChecked", "StepStarted", "StepCompleted", "ValueRecorded",
            "PolicyDecided", "ToolStarted", "ToolSucceeded", "ModelResponded",
            "ChildStarted", "ChildFinished", "TimerSet", "TimerFired", "SignalAwaited",
            "SignalReceived", "Escalated"} <= set(summary)
    assert "rule lookups-allowed, policy v7" in summary["PolicyDecided"]
    assert f"model {MODEL} #1: 120 tokens in, 30 out, $0.0125" in summary["ModelResponded"]
    assert "signal 'go' from apikey:acme-operator" in summary["SignalReceived"]
    assert "question: Refund it?" in summary["Escalated"]
    # The details hold every field: the call's args and result, the model's usage.
    details = r.text.split('id="e-', 1)[1]
    model = details.split('<span class="kind">ModelResponded</span>', 1)[1].split("</li>")[0]
    for name, value in (("model", MODEL), ("tokens_in", "120"), ("tokens_out", "30"),
                        ("cost_usd", "0.0125"), ("latency_ms", "")):
        assert f"<dt>{name}</dt>" in model and value in model
    started = r.text.split('<span class="kind">ToolStarted</span>', 1)[1].split("</li>")[0]
    assert "<dt>args</dt>" in started and "INV-9" in started
    facts = _text(r.text.split('id="facts"', 1)[1].split("</section>", 1)[0])
    for fact in ("journey", "escalated", "trip-9", "acme", "an answer from", "helper (detached)",
                 "completed", "tokens 120 in, 30 out", "cost $0.0125"):
        assert fact in facts, fact
    assert f'href="/approvals/{run_id}"' in r.text
    child = Client(world.store).children(run_id, tenant_id="acme")[0].run_id
    assert f'href="/runs/{child}"' in r.text


def test_a_run_waiting_for_an_approval_links_to_its_request(world: World) -> None:
    run_id = start(world, "refunds", {"invoice": "INV-3", "amount": 40})
    with sign_in(world) as browser:
        r = browser.get(f"/runs/{run_id}")
    summary = {t: x for _, t, x in _kinds(r.text)}
    assert "APPROVAL needed by a finance for refund" in summary["ApprovalRequested"]
    assert "policy: require_approval refund" in summary["PolicyDecided"]
    assert "rule refunds" in summary["PolicyDecided"]
    facts = _text(r.text.split('id="facts"', 1)[1].split("</section>", 1)[0])
    # What it waits on, in words, with the request's one-line summary.
    assert "approval by finance: Call refund — open the request" in " ".join(facts.split())
    assert f'href="/approvals/{run_id}"' in r.text


def test_values_are_shown_as_text_never_as_markup(world: World) -> None:
    run_id = journey_to_the_question(world)
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{run_id}").text
        succeeded = next(s for s, t, _ in _kinds(page) if t == "ToolSucceeded")
        at = browser.get(f"/runs/{run_id}?at={succeeded}").text
    for text in (page, at):
        assert MARKUP not in text and "<script>alert" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert MARKUP in html.unescape(at.split('id="state-json"', 1)[1].split("</pre>")[0])


def _check_states(world: World, browser: httpx.Client, run_id: str, seqs: list[int]) -> None:
    for seq in seqs:
        r = browser.get(f"/runs/{run_id}/state", params={"at": seq})
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["seq"] == seq
        assert got["state"] == _folded(world, run_id, seq)
        before = _folded(world, run_id, seq - 1) if seq > 1 else json.loads(
            json.dumps(RunState(tenant_id="acme", run_id=run_id).to_json()))
        assert got["patch"] == make_patch(before, got["state"])


def test_the_state_at_an_event_is_the_fold_of_the_journal_up_to_it(world: World) -> None:
    run_id = start(world, "laps", {"laps": 60})
    head = len(Client(world.store).history(run_id, tenant_id="acme"))
    with sign_in(world) as browser:
        _check_states(world, browser, run_id, [1, 2, 57, 150, head - 1, head])
        page = browser.get(f"/runs/{run_id}", params={"at": 57, "page": 1}).text
        body = page.split('id="state"', 1)[1].split("</section>", 1)[0]
        assert "State after event 57" in body
        patch = html.unescape(body.split('id="state-patch">', 1)[1].split("</pre>")[0])
        assert json.loads(patch) == make_patch(_folded(world, run_id, 56),
                                               _folded(world, run_id, 57))
        assert 'id="e-57" data-seq="57"' in page
        beyond = browser.get(f"/runs/{run_id}/state", params={"at": head + 1})
        assert beyond.status_code == 422 and f"ends at {head}" in beyond.json()["detail"]
        shown = browser.get(f"/runs/{run_id}", params={"at": head + 1})
        assert shown.status_code == 200 and f"no event at seq {head + 1}" in shown.text


def test_events_after_the_checkpoint_fold_from_it_while_a_step_is_in_flight(
        world: World) -> None:
    run_id = start(world, "pause", {})
    checkpoint = world.store.load_checkpoint("acme", run_id)
    assert checkpoint is not None
    world.call("POST", f"/v1/runs/{run_id}/signals", role="operator", json={"name": "go"})
    GATE.entered.clear()
    GATE.opened.clear()
    worker = threading.Thread(target=drive, args=(world,))
    worker.start()
    try:
        assert GATE.entered.wait(60)
        journal = Client(world.store).history(run_id, tenant_id="acme")
        assert world.store.load_checkpoint("acme", run_id) == checkpoint
        assert [type(r.event).__name__ for r in journal[checkpoint[0]:]][-1] == "ToolStarted"
        with sign_in(world) as browser:
            _check_states(world, browser, run_id, list(range(checkpoint[0] - 1,
                                                              len(journal) + 1)))
            page = browser.get(f"/runs/{run_id}").text
            assert _kinds(page)[-1][:2] == (len(journal), "ToolStarted")
    finally:
        GATE.opened.set()
        worker.join(60)
    assert world.store.get_run("acme", run_id).status == "completed"  # type: ignore[union-attr]


def test_the_pages_hold_every_event_exactly_once(world: World) -> None:
    run_id = start(world, "laps", {"laps": 150})
    head = len(Client(world.store).history(run_id, tenant_id="acme"))
    assert head > 2 * PAGE
    seen: list[int] = []
    with sign_in(world) as browser:
        newest = browser.get(f"/runs/{run_id}").text
        url: str | None = f"/runs/{run_id}?page=1"
        pages = 0
        while url is not None:
            page = browser.get(url.replace("&amp;", "&")).text
            seen += [s for s, _, _ in _kinds(page)]
            pages += 1
            found = re.search(r'href="([^"]+)" rel="next"', page)
            url = found.group(1) if found else None
        assert pages == (head - 1) // PAGE + 1
        assert f"page {pages} of {pages}" in newest
        assert [s for s, _, _ in _kinds(newest)] == list(range((pages - 1) * PAGE + 1,
                                                               head + 1))
        empty = browser.get(f"/runs/{run_id}?page={pages + 3}")
        assert empty.status_code == 200 and _kinds(empty.text) == []
    assert seen == list(range(1, head + 1))


def test_another_tenants_run_is_the_same_404_as_a_missing_one(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    with sign_in(world, tenant="globex") as browser:
        for path in ("/runs/{}", "/runs/{}?at=1", "/runs/{}/state?at=1",
                     "/runs/{}/events/stream"):
            theirs = browser.get(path.format(run_id))
            missing = browser.get(path.format("no-such-run"))
            assert theirs.status_code == missing.status_code == 404, path
            assert theirs.text == missing.text
            assert run_id not in theirs.text
    assert world.store.list_access("globex") == []


def test_every_read_of_the_run_is_in_the_access_log(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
               json={"name": "paid", "payload": {"amount": 5}})
    start(world, "reminders", {"invoice": "INV-2", "amount": 5})  # drives the first too
    key_id = world.token["acme"]["viewer"][4:20]
    with sign_in(world) as browser:
        for path, endpoint in ((f"/runs/{run_id}", "GET /runs/{run_id}"),
                               (f"/runs/{run_id}?at=2&page=1", "GET /runs/{run_id}"),
                               (f"/runs/{run_id}/state?at=3", "GET /runs/{run_id}/state"),
                               (f"/runs/{run_id}/events/stream",
                                "GET /runs/{run_id}/events/stream")):
            last = max((a.seq for a in world.store.list_access("acme", limit=1000)),
                       default=0)
            r = browser.get(path)
            assert r.status_code == 200, path
            added = [a for a in world.store.list_access("acme", limit=1000) if a.seq > last]
            assert [(a.run_id, a.key_id, a.key_name, a.endpoint) for a in added] == [
                (run_id, key_id, "acme-viewer", endpoint)], path
        before = len(world.store.list_access("acme", limit=1000))
        assert browser.get(f"/runs/{run_id}/state?at=999").status_code == 422
        assert browser.get("/runs/nope").status_code == 404
        assert browser.get("/runs/nope/state?at=1").status_code == 404
        assert len(world.store.list_access("acme", limit=1000)) == before


def test_a_signed_out_browser_reads_nothing(world: World) -> None:
    run_id = start(world, "reminders", {"invoice": "INV-1", "amount": 5})
    with httpx.Client(base_url=world.server.url) as stranger:
        page = stranger.get(f"/runs/{run_id}", headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        for path in (f"/runs/{run_id}/state?at=1", f"/runs/{run_id}/events/stream"):
            assert stranger.get(path, headers={"Accept": "*/*"}).status_code == 401
    assert world.store.list_access("acme") == []
