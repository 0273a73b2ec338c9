"""The run page's live model answer, in a real headless Chromium (the system's, driven by
Playwright): a worker streams a model call from a local OpenAI wire server; the page shows
the words as they arrive, while the model is still answering. An answer cut mid-way and
asked again shows once, from its restart: the page says it started over and never shows
the abandoned words twice. Once the reply is journaled, the page says so.

The screenshot goes under the test's directory, or under ``UNDERWAY_SCREENSHOTS`` when set
(``scripts/console-screenshots`` writes docs/img)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect, sync_playwright
from pydantic import BaseModel

import underway as uw
from fakes.model_provider import FakeProvider, openai_stream
from fakes.service_world import World
from underway.models import Message, ModelRequest, OpenAIChat
from underway.runner import Runner

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
WAIT = 15_000
"""How long (ms) a condition may take to show on a page before the test fails."""


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


class S(BaseModel):
    pass


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_page_shows_tokens_live_and_an_abandoned_answer_once(
        browser: Browser, db: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    world = World(str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")))
    hold = threading.Event()
    cut = dataclasses.replace(openai_stream("Once ", "upon ", "a ", "time."), cut_after=3)
    held = openai_stream("Once ", "upon ", "a ", "time.", hold=hold, hold_after=3)
    with FakeProvider(cut, held) as provider:
        model = OpenAIChat("gpt-4o-mini", api_key="sk-test", base_url=f"{provider.origin}/v1",
                           sleep=lambda _: asyncio.sleep(0))
        flow = uw.Flow("storyteller", state=S)

        @flow.step
        async def tell(ctx: uw.RunContext[S, Any]) -> Any:
            return ctx.done(await ctx.model(model, ModelRequest(
                messages=[Message.user("A story")], max_tokens=64).to_json(), stream=True))

        world.engine = uw.Engine(world.worker_store, flows=[flow], clock=world.clock)
        run_id, _ = world.engine.start(flow, tenant_id="acme")

        async def work() -> None:
            async with model:
                await Runner(world.engine).run_until_idle()

        worker = threading.Thread(target=lambda: asyncio.run(work()))
        worker.start()
        context = browser.new_context(base_url=world.server.url,
                                      viewport={"width": 1360, "height": 900})
        page = context.new_page()
        try:
            page.goto("/login")
            page.fill("#token", world.token["acme"]["viewer"])
            page.click("main button[type=submit]")
            expect(page).to_have_url(f"{world.server.url}/runs")
            page.goto(f"/runs/{run_id}")
            answer = page.locator("#answer .answer-text")
            # The cut attempt said "Once upon "; its restart said it again: shown once.
            expect(answer).to_have_text("Once upon ", timeout=WAIT)
            expect(page.locator("#answer .answer-note")).to_have_text(
                "started over (attempt 2)", timeout=WAIT)
            expect(page.locator("#answer")).to_be_visible()
            assert world.engine.state(run_id, tenant_id="acme").status != "completed"
            shots = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path) \
                if db == "sqlite" else tmp_path
            shots.mkdir(parents=True, exist_ok=True)
            page.locator("#answer").screenshot(path=str(shots / "console-run-answer.png"))
            hold.set()
            expect(answer).to_have_text("Once upon a time.", timeout=WAIT)
            expect(page.locator("#answer .answer-note")).to_have_text("journaled",
                                                                       timeout=WAIT)
            expect(page.locator("#answer-state")).to_have_text("finished", timeout=WAIT)
        finally:
            hold.set()
            worker.join(60)
            context.close()
    assert world.engine.state(run_id, tenant_id="acme").status == "completed"
    world.close()
