"""Bulk answers signed in a real headless Chromium, on SQLite and a real PostgreSQL: 28 runs
ask one question; an approver opens "answer all 28" from the approvals inbox, reads the dry
run's count and each run's exact signed bytes, writes the answer once, and the browser
signs one decision per run with its key. Every run finishes with its own decision, whose
recorded signature verifies over the bytes the page showed for that run.

Screenshots of the dry run and of the result go to ``UNDERWAY_SCREENSHOTS`` when set
(``scripts/console-screenshots`` writes docs/img), else under the test's directory."""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

import underway as uw
from fakes import bulk_flows
from fakes.service_world import FLOWS, World
from underway.guard.approvals import SignedDecision
from underway.guard.approvals.keys import decode_public_key

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
WAIT = 30_000
"""How long (ms) a condition may take to show on a page before the test fails."""
RUNS = 28
T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: run scripts/ensure-chromium",
                    pytrace=False)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    w = World(str(url))
    w.engine = uw.Engine(w.worker_store, flows=[*FLOWS, *bulk_flows.FLOWS], clock=w.clock)
    bulk_flows.OUTAGE[0] = True
    yield w
    w.close()


def aside(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on another thread: Playwright's sync API keeps an event loop here."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def start(world: World, flow: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        r = world.call("POST", "/v1/runs", role="operator",
                       json={"flow": flow, "input": {"sku": f"SKU-{i}"}})
        assert r.status_code == 201, r.text
        ids.append(str(r.json()["run_id"]))
    aside(world.drive)
    return ids


def test_an_approver_answers_28_waiting_runs_in_one_go(browser: Browser, world: World,
                                                       tmp_path: Path) -> None:
    asking = start(world, "asking", RUNS)
    dead = start(world, "brittle", 1)
    context = browser.new_context(base_url=world.server.url,
                                  viewport={"width": 1440, "height": 900})
    page: Page = context.new_page()
    shots = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    try:
        page.goto("/login")
        page.fill("#token", world.token["acme"]["approver"])
        page.click("main button[type=submit]")
        expect(page).to_have_url(re.compile(r"/runs$"))

        page.goto("/approvals")
        expect(page.locator("#key-status")).to_contain_text("No signing key", timeout=WAIT)
        page.fill("#key-approver", "pat")
        page.click("#key-new button[type=submit]")
        expect(page.locator("#key-status")).to_contain_text("not registered yet", timeout=WAIT)
        public_key = page.locator("#key-public").inner_text().strip()
        r = world.call("POST", "/v1/approvers", json={
            "approver_id": "pat", "public_key": public_key, "roles": ["support"]})
        assert r.status_code == 201, r.text

        page.goto("/approvals")
        link = page.locator("#bulk-groups a[data-action=answer]")
        expect(link).to_have_text(f"Answer all {RUNS} runs waiting on “{bulk_flows.QUESTION}”")
        link.click()
        expect(page.locator('#bulk-count [data-count="eligible"]')).to_have_text(str(RUNS))
        rows = page.locator("#bulk-runs tbody tr")
        expect(rows).to_have_count(RUNS)
        assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.run)")) == sorted(asking)
        assert dead[0] not in page.locator("#bulk-runs").inner_text()
        expect(page.locator("#key-status")).to_contain_text("registered", timeout=WAIT)
        page.fill("#answer", "Pune")
        page.fill("#comment", "all from Pune — ✓")
        button = page.locator("#bulk-answer")
        expect(button).to_have_text(f"Sign and send answers to {RUNS} runs")
        expect(button).to_be_enabled(timeout=WAIT)
        first = rows.first
        first.locator("details summary").click()
        expect(first.locator("pre.signed")).to_contain_text('"answer":"Pune"', timeout=WAIT)
        before = first.locator("pre.signed").inner_text()
        page.screenshot(path=str(shots / "console-bulk-answer-dry-run.png"))

        button.click()
        expect(page.locator('#bulk-result [data-count="done"]')).to_have_text(
            str(RUNS), timeout=WAIT)
        expect(page.locator('#bulk-result [data-count="failed"]')).to_have_text("0")
        expect(page.locator('#bulk-runs .outcome[data-outcome="done"]')).to_have_count(RUNS)
        expect(page.locator('#bulk-runs pre.signed[data-state="signed"]')).to_have_count(RUNS)
        shown: dict[str, str] = dict(rows.evaluate_all(
            "rs => rs.map(r => [r.dataset.run, r.querySelector('pre.signed').textContent])"))
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "console-bulk-answer-done.png"))
    finally:
        context.close()
    # The preview before the click was what the first run's decision then signed.
    assert before == shown[rows_first_id(shown, before)]

    aside(world.drive)
    key = decode_public_key(public_key)
    nonces = set()
    for run_id in asking:
        assert world.call("GET", f"/v1/runs/{run_id}").json()["status"] == "completed"
        log = world.call("GET", f"/v1/runs/{run_id}/events").json()
        [answered] = [e for e in log if e["type"] == "EscalationAnswered"]
        d = SignedDecision.model_validate(answered["data"]["decision"])
        assert (d.run_id, d.approver_id, d.answer, d.comment) == (
            run_id, "pat", "Pune", "all from Pune — ✓")
        # Each run's own decision: the bytes the page showed for it, under its signature.
        assert shown[run_id].encode() == d.signed_bytes()
        key.verify(base64.b64decode(d.signature), d.signed_bytes())
        nonces.add(d.nonce)
    assert len(nonces) == RUNS
    assert world.call("GET", f"/v1/runs/{dead[0]}").json()["status"] == "dead"


def rows_first_id(shown: dict[str, str], before: str) -> str:
    """The run whose signed text carries the run id the first row's preview named."""
    found = re.search(r'"run_id":"([^"]+)"', before)
    assert found, before
    return found.group(1)
