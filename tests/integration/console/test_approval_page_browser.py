"""The approval page in a real headless Chromium (the system's, driven by Playwright): the
inbox and the request read like the decision (summary, money in the currency's locale,
evidence and risks above the call's details), and "Exactly what is signed" shows the very
bytes the browser signed: after an approval and after a rejection, the preview verifies
against the signature the journal recorded, with the recorded nonce.

Screenshots of the inbox and the request page go to ``UNDERWAY_SCREENSHOTS`` when set
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
from fakes.procurement_flows import FLOWS as DESK
from fakes.service_world import FLOWS, World
from underway.guard.approvals import SignedDecision
from underway.guard.approvals.keys import decode_public_key

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
WAIT = 15_000
"""How long (ms) a condition may take to show on a page before the test fails."""
T = TypeVar("T")
ORDER = {"po": "PO-7", "supplier": {"name": "Shakti Steel"}, "amount": "232000.00",
         "currency": "INR", "from_account": "HDFC-OPS-0042"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: run scripts/ensure-chromium",
                    pytrace=False)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def desk(db_url: str) -> Iterator[World]:
    w = World(db_url)
    w.engine = uw.Engine(w.worker_store, flows=[*FLOWS, *DESK], clock=w.clock)
    yield w
    w.close()


def aside(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on another thread: Playwright's sync API keeps an event loop here."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def start(world: World, data: dict[str, Any]) -> str:
    r = world.call("POST", "/v1/runs", role="operator", json={"flow": "procure", "input": data})
    assert r.status_code == 201, r.text
    aside(world.drive)
    return str(r.json()["run_id"])


def recorded(world: World, run_id: str, kind: str) -> SignedDecision:
    log = world.call("GET", f"/v1/runs/{run_id}/events").json()
    [found] = [e for e in log if e["type"] == kind]
    return SignedDecision.model_validate(found["data"]["decision"])


def decide_in_page(page: Page, run_id: str, button: str) -> str:
    """Click ``button`` on the request page; the preview's text once the decision is sent."""
    page.goto(f"/approvals/{run_id}")
    expect(page.locator(f"#{button}")).to_be_enabled(timeout=WAIT)
    page.fill("#comment", "checked — ✓ goods received")
    page.locator(".signed-bytes summary").click()
    before = page.locator("#signed-preview").inner_text()
    page.click(f"#{button}")
    expect(page.locator("#decision-result")).to_contain_text("signed by pat and sent",
                                                             timeout=WAIT)
    expect(page.locator("#signed-preview")).to_have_attribute("data-state", "signed")
    expect(page.locator("#signed-note")).to_contain_text("Signed and sent")
    after: str = page.evaluate("document.getElementById('signed-preview').textContent")
    # What the page previewed before the click carried the nonce it then signed with.
    assert re.search(r'"nonce":"([0-9a-f]+)"', before)[1] \
        == re.search(r'"nonce":"([0-9a-f]+)"', after)[1]  # type: ignore[index]
    return after


def test_the_request_reads_like_the_decision_and_the_preview_is_what_was_signed(
        browser: Browser, desk: World, tmp_path: Path) -> None:
    world = desk
    paid = start(world, ORDER)
    refused = start(world, {**ORDER, "po": "PO-8", "amount": "1234.5", "currency": "USD",
                            "from_account": "CITI-US-9"})
    context = browser.new_context(base_url=world.server.url,
                                  viewport={"width": 1360, "height": 900})
    page = context.new_page()
    try:
        page.goto("/login")
        page.fill("#token", world.token["acme"]["approver"])
        page.click("main button[type=submit]")
        expect(page).to_have_url(re.compile(r"/runs$"))
        expect(page.locator("#runs")).to_contain_text("on approval by procurement")

        page.goto("/approvals")
        expect(page.locator("#key-status")).to_contain_text("No signing key", timeout=WAIT)
        page.fill("#key-approver", "pat")
        page.click("#key-new button[type=submit]")
        expect(page.locator("#key-status")).to_contain_text("not registered yet", timeout=WAIT)
        public_key = page.locator("#key-public").inner_text().strip()
        assert len(base64.b64decode(public_key, validate=True)) == 32
        r = world.call("POST", "/v1/approvers", json={
            "approver_id": "pat", "public_key": public_key, "roles": ["procurement"]})
        assert r.status_code == 201, r.text

        page.goto("/approvals")
        row = page.locator(f"#requests tr[data-run='{paid}']")
        expect(row.locator(".summary")).to_contain_text(
            "Pay ₹2,32,000.00 to Shakti Steel for PO-7")
        expect(row.locator(".money")).to_have_text("moves ₹2,32,000.00 out of HDFC-OPS-0042")
        expect(page.locator(f"#requests tr[data-run='{refused}'] .money")).to_have_text(
            "moves $1,234.50 out of CITI-US-9")
        expect(page.locator("#key-status")).to_contain_text("registered", timeout=WAIT)
        shots = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "console-approvals-summary.png"), full_page=True)

        page.goto(f"/approvals/{paid}")
        expect(page.locator("h1")).to_have_text(
            "Approve: Pay ₹2,32,000.00 to Shakti Steel for PO-7?")
        expect(page.locator("#moves")).to_have_text(
            "This call moves ₹2,32,000.00 out of HDFC-OPS-0042.")
        # Evidence and risks sit above the request's facts and the exact arguments.
        top = {name: page.locator(f"#{name}").bounding_box() for name in
               ("moves", "evidence", "risks", "policy-rule", "args")}
        ys = [box["y"] for box in top.values() if box is not None]
        assert len(ys) == 5 and ys == sorted(ys), top
        expect(page.locator("#approve")).to_be_enabled(timeout=WAIT)
        page.locator(".signed-bytes summary").click()
        page.screenshot(path=str(shots / "console-approval-summary.png"), full_page=True)

        approved = decide_in_page(page, paid, "approve")
        rejected = decide_in_page(page, refused, "reject")
    finally:
        context.close()

    aside(world.drive)
    key = decode_public_key(public_key)
    for run_id, kind, preview in ((paid, "ApprovalGranted", approved),
                                  (refused, "ApprovalRejected", rejected)):
        d = recorded(world, run_id, kind)
        # The preview is, byte for byte, what the recorded signature covers.
        assert preview.encode() == d.signed_bytes()
        key.verify(base64.b64decode(d.signature), preview.encode())
        assert f'"nonce":"{d.nonce}"' in preview
        assert d.comment == "checked — ✓ goods received"
    assert world.call("GET", f"/v1/runs/{paid}").json()["status"] == "completed"
