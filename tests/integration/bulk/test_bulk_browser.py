"""The console's bulk form in a real headless Chromium, on SQLite and a real PostgreSQL:
an operator filters the runs list to the dead runs of one flow, asks for a bulk resume,
reads the dry run's count and ids, confirms, and every run resumes and finishes.

A screenshot of the dry run and of the result is saved under the test's directory, or
under ``UNDERWAY_SCREENSHOTS`` when set (``scripts/console-screenshots`` writes docs/img)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from fakes import bulk_flows
from fakes.service_world import World
from underway import events as ev

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
WAIT = 15_000
"""How long (ms) a condition may take to show on a page before the test fails."""
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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    w = World(str(url))
    for flow in bulk_flows.FLOWS:
        w.engine.register(flow)
    bulk_flows.OUTAGE[0] = True
    yield w
    w.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where this test's screenshots go."""
    target = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def aside(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on another thread: Playwright's sync API keeps an event loop in this
    one, and driving the worker starts its own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def start(world: World, flow: str, n: int) -> list[str]:
    ids = [world.call("POST", "/v1/runs", role="operator",
                      json={"flow": flow, "input": {"sku": f"SKU-{i}"}}).json()["run_id"]
           for i in range(n)]
    aside(world.drive)
    return ids


def status(world: World, run_id: str) -> str:
    row = world.store.get_run("acme", run_id)
    assert row is not None
    return row.status


def test_an_operator_resumes_every_dead_run_of_a_flow_from_the_runs_list(
    browser: Browser, world: World, shots: Path,
) -> None:
    dead = start(world, "brittle", 9)
    others = start(world, "asking", 2)
    context = browser.new_context(base_url=world.server.url,
                                  viewport={"width": 1360, "height": 900})
    page: Page = context.new_page()
    try:
        page.goto("/login")
        page.fill("#token", world.token["acme"]["operator"])
        page.click("main button[type=submit]")
        expect(page).to_have_url(re.compile(r"/runs$"))

        page.goto("/runs?status=dead&flow=brittle")
        expect(page.locator("#runs tbody tr")).to_have_count(9)
        page.select_option("#bulk-form select[name=action]", "resume")
        page.click("#bulk-form button[type=submit]")
        expect(page.locator("#bulk-count")).to_contain_text("9 runs match", timeout=WAIT)
        expect(page.locator('[data-count="eligible"]')).to_have_text("9")
        expect(page.locator("#bulk-preview li")).to_have_count(9)
        page.screenshot(path=str(shots / "console-bulk-dry-run.png"), full_page=True)
        assert {status(world, r) for r in dead} == {"dead"}

        bulk_flows.OUTAGE[0] = False
        page.click("#bulk-confirm button[type=submit]")
        expect(page.locator('[data-count="done"]')).to_have_text("9", timeout=WAIT)
        expect(page.locator("#bulk-runs tbody tr")).to_have_count(9)
        page.screenshot(path=str(shots / "console-bulk-done.png"), full_page=True)
    finally:
        context.close()
    aside(world.drive)
    for run_id in dead:
        assert status(world, run_id) == "completed"
        resumed = [r.event for r in world.engine.journal.history("acme", run_id)
                   if isinstance(r.event, ev.RunResumed)]
        assert [e.by for e in resumed] == ["apikey:acme-operator"]
    assert {status(world, r) for r in others} == {"escalated"}
