"""The run page in a real headless Chromium (the system's, driven by Playwright): the Gantt
chart and the graph of a run whose values are Hindi and Tamil, drawn in the Lohit fonts
(scripts/ensure-chromium installs them); long values wrap inside their cards; the page
follows a live run through the facts the server renders; a dead run's page keeps its
resolution link and never says "live".

Screenshots go under the test's directory, or under ``UNDERWAY_SCREENSHOTS`` when set
(``scripts/console-screenshots`` writes docs/img)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from fakes.clinic_flows import MESSAGE, PATIENT, confirmed_visit, drive, start
from fakes.service_world import World

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
WAIT = 15_000
"""How long (ms) a condition may take to show on a page before the test fails."""
WORKER = "host-a:0f0f0f0f0f0f:101:5"
T = TypeVar("T")


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
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture
def sqlite_world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url)
    yield w
    w.close()


def aside(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args)`` on another thread: Playwright's sync API keeps an event loop in this
    one, and a worker runs its own (``asyncio.run``)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def open_page(browser: Browser, world: World) -> Page:
    context = browser.new_context(base_url=world.server.url,
                                  viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.goto("/login")
    page.fill("#token", world.token["acme"]["viewer"])
    page.click("main button[type=submit]")
    expect(page).to_have_url(f"{world.server.url}/runs")
    return page


def fonts_of(page: Page, selector: str) -> set[str]:
    """The fonts Chromium drew the text of ``selector``'s element with."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return {f["familyName"] for f in fonts}


def fits(page: Page, selector: str) -> bool:
    """Whether every element matching ``selector`` shows its content without running out
    of its box sideways."""
    return bool(page.eval_on_selector_all(
        selector, "els => els.length > 0 && els.every(e => e.scrollWidth <= e.clientWidth + 1)"))


def test_the_run_page_draws_the_timeline_and_graph_in_hindi_and_tamil(
    browser: Browser, sqlite_world: World, shots: Path,
) -> None:
    world = sqlite_world
    long_message = MESSAGE + " " + "அ" * 30 + "x" * 400  # an unbroken run past any card
    run_id = aside(confirmed_visit, world, message=long_message)
    page = open_page(browser, world)
    try:
        page.goto(f"/runs/{run_id}")
        expect(page.locator("#run-status")).to_have_text("completed")
        rows = page.locator("#gantt > li")
        expect(rows).to_have_count(4)
        expect(rows.nth(1).locator("summary > .g-title")).to_have_text("step remind -> confirm")
        expect(rows.nth(1).locator("summary > .g-worker")).to_have_text("host-a pid 101")
        expect(rows.nth(2).locator("summary > .g-worker")).to_have_text("host-b pid 202")
        # One click opens a row: its calls and wait with their bars, and its events.
        rows.nth(2).locator("summary").click()
        more = rows.nth(2).locator(".g-more")
        expect(more).to_be_visible()
        expect(more).to_contain_text("waiting for signal 'confirmed'")
        expect(more.locator("rect.g-wait")).to_have_count(1)
        expect(more).to_contain_text(PATIENT)
        rows.nth(1).locator("summary").click()
        expect(rows.nth(1).locator(".g-more rect.g-tool")).to_have_count(1)
        expect(rows.nth(1).locator(".g-more rect.g-model")).to_have_count(1)
        # Hindi and Tamil are drawn in their own fonts, not as empty boxes.
        assert {"Lohit Devanagari", "Lohit Tamil"} <= fonts_of(page, "#facts-list code.value")
        # The long result wraps inside the facts card; the details' blocks wrap too.
        assert fits(page, "#facts") and fits(page, "#facts-list dd")
        page.locator("#timeline li.event details >> nth=1").locator("summary").click()
        assert fits(page, "#timeline li.event details[open] pre")
        page.locator("#overview").screenshot(path=str(shots / "console-run-timeline.png"))
        page.locator("#graph").screenshot(path=str(shots / "console-run-graph.png"))
        expect(page.locator("#graph svg .node")).to_have_count(4)
        # The link of a row leads to its events in the log.
        rows.nth(2).locator("summary a").click()
        expect(page).to_have_url(f"{world.server.url}/runs/{run_id}?page=1#e-10")
        expect(page.locator("#e-10")).to_contain_text("StepStarted")
    finally:
        page.context.close()


def test_the_page_follows_a_live_run_and_a_dead_run_keeps_its_resolution_link(
    browser: Browser, sqlite_world: World, shots: Path,
) -> None:
    world = sqlite_world
    run_id = aside(start, world, "clinic", WORKER)
    page = open_page(browser, world)
    try:
        page.goto(f"/runs/{run_id}")
        expect(page.locator("#live")).to_have_text("live", timeout=WAIT)
        expect(page.locator("#facts-waiting")).to_contain_text("a timer")
        # The run moves on to wait for a signal: the page puts the server's facts in place.
        world.clock.advance(31)
        aside(drive, world, WORKER)
        expect(page.locator("#facts-waiting")).to_contain_text("signal confirmed",
                                                               timeout=WAIT)
        expect(page.locator("#facts-step")).to_have_text("close")  # where the signal leads
        r = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                       json={"name": "confirmed", "payload": {"by": PATIENT}})
        assert r.status_code == 202
        aside(drive, world, WORKER)
        expect(page.locator("#run-status")).to_have_text("completed", timeout=WAIT)
        expect(page.locator("#live")).to_have_text("finished", timeout=WAIT)
        expect(page.locator("#facts-list")).to_contain_text(PATIENT, timeout=WAIT)
        # The steps and the graph are drawn again as the run moved: every attempt is there.
        expect(page.locator("#gantt > li")).to_have_count(4, timeout=WAIT)
        expect(page.locator("#gantt > li").last).to_contain_text("step close -> end")
        expect(page.locator("#graph svg .node.ended-completed")).to_have_count(1)

        dead = aside(start, world, "doomed", WORKER)
        page.goto(f"/runs/{dead}")
        expect(page.locator("#run-status")).to_have_text("dead")
        expect(page.locator("#live")).to_have_count(0)
        expect(page.locator("h1")).to_contain_text("stopped: an operator resumes or resolves it")
        link = page.locator("#facts-request")
        expect(link).to_have_attribute("href", f"/approvals/{dead}")
        expect(page.locator("#gantt > li").last).to_contain_text("step parse dead")
        page.screenshot(path=str(shots / "console-run-dead.png"), full_page=True)
        # Nothing on the page replaces the link afterwards.
        page.wait_for_load_state("networkidle")
        expect(link).to_be_visible()
        expect(page.locator("#facts-waiting")).not_to_contain_text("reload")
    finally:
        page.context.close()
