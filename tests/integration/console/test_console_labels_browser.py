"""Run labels in a real headless Chromium: an operator types a label filter into the runs
list, sees a column per label, clicks a label to filter by it, and finds the labels of a
held run in the approvals inbox. It saves ``console-runs-labels.png`` (under
``UNDERWAY_SCREENSHOTS`` when set: ``scripts/console-screenshots`` writes docs/img)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from fakes.service_world import World

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
WAIT = 15_000
"""How long (ms) a condition may take to show on a page before the test fails."""

ORDERS = [
    ("reminders", "INV-101", {"sku": "RICE-25KG", "warehouse": "Pune", "qty": 40}),
    ("reminders", "INV-102", {"sku": "DAL-10KG", "warehouse": "Pune", "qty": 12}),
    ("reminders", "INV-103", {"sku": "RICE-25KG", "warehouse": "Chennai", "qty": 64}),
    ("refunds", "INV-104", {"sku": "OIL-5L", "warehouse": "Chennai", "qty": 3,
                            "supplier": "Sri Balaji Traders"}),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module (the system's: browsers are never downloaded)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: run scripts/ensure-chromium "
                    "(make test does)", pytrace=False)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url)
    yield w
    w.close()


def _start_all(world: World) -> list[str]:
    ids = []
    for flow, invoice, labels in ORDERS:
        r = world.call("POST", "/v1/runs", role="operator", json={
            "flow": flow, "input": {"invoice": invoice, "amount": 5}, "labels": labels})
        assert r.status_code == 201, r.text
        ids.append(str(r.json()["run_id"]))
    world.drive()
    return ids


def _column(page: Page, name: str) -> list[str]:
    return [t.strip() for t in page.locator(f'#runs td[data-label="{name}"]').all_inner_texts()]


def test_an_operator_filters_the_runs_by_label_in_the_browser(
        browser: Browser, world: World, tmp_path: Path) -> None:
    shots = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(1) as pool:
        # The world's worker runs its own event loop; Playwright keeps one here.
        ids: list[Any] = pool.submit(_start_all, world).result()
    context = browser.new_context(base_url=world.server.url,
                                  viewport={"width": 1360, "height": 700})
    page = context.new_page()
    page.goto("/login")
    page.fill("#token", world.token["acme"]["approver"])
    page.click("main button[type=submit]")
    expect(page).to_have_url(re.compile(r"/runs$"))
    headers = page.locator("#runs thead th.label").all_text_contents()
    assert headers == ["qty", "sku", "supplier", "warehouse"]
    page.fill('input[name="label"]', "warehouse=Pune")
    page.click("form.toolbar button[type=submit]")
    expect(page.locator("#runs tbody tr")).to_have_count(2, timeout=WAIT)
    assert sorted(_column(page, "sku")) == ["DAL-10KG", "RICE-25KG"]
    page.fill('input[name="label"]', "warehouse=Pune, sku=RICE-25KG")
    page.click("form.toolbar button[type=submit]")
    expect(page.locator("#runs tbody tr")).to_have_count(1, timeout=WAIT)
    expect(page.locator("#runs tbody")).to_contain_text(ids[0])
    # A label's value links to the runs that have it.
    page.click("form.toolbar a")
    page.locator('#runs td[data-label="sku"] a', has_text="RICE-25KG").first.click()
    expect(page.locator("#runs tbody tr")).to_have_count(2, timeout=WAIT)
    assert sorted(_column(page, "warehouse")) == ["Chennai", "Pune"]
    page.goto("/runs")
    page.screenshot(path=str(shots / "console-runs-labels.png"), full_page=True)
    page.goto("/approvals")
    held = page.locator(f'#requests tr[data-run="{ids[3]}"]')
    expect(held.locator('td[data-label="supplier"]')).to_have_text("Sri Balaji Traders",
                                                                   timeout=WAIT)
    expect(held.locator('td[data-label="sku"]')).to_have_text("OIL-5L")
    context.close()
