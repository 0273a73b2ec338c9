"""The metrics page (``/charts``) and its figures (``/charts/data``): after real runs over two
days — model calls, approvals decided and expired, escalations, dead runs — each day holds
the right numbers for the session's tenant and nothing of the other; the charts are SVG
drawn on the server with no inline script or style; an empty window says so; the window is
one of 7, 30 or 90 days and anything else is a 400."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.activity_flows import COST, TOKENS_IN, TOKENS_OUT
from fakes.activity_flows import FLOWS as ACTIVITY_FLOWS
from fakes.console_browser import sign_in
from fakes.service_world import FLOWS, World
from underway.guard.approvals import sign_decision
from underway.runner import Runner
from underway.service.console import CONSOLE_CSP

DAY = 86_400


@dataclass
class Scene:
    """Two days of runs (``first`` and ``second``, at 01:00 UTC) and who is dead now."""

    first: str
    second: str
    dead: dict[str, set[str]]


class Driver:
    """Starts runs through the API and drives them with an engine that has every flow."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.engine = uw.Engine(world.worker_store, flows=[*FLOWS, *ACTIVITY_FLOWS],
                                clock=world.clock)
        self.key = world.approver("acme", "fin", "finance")

    def start(self, flow: str, tenant: str = "acme") -> str:
        return self.world.start(flow, tenant=tenant, drive=False)

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def approve(self, run_id: str, key: Ed25519PrivateKey | None = None) -> None:
        asked = self.engine.client.state(run_id, tenant_id="acme").pending_approval
        assert asked is not None, run_id
        self.engine.submit_decision(sign_decision(
            key or self.key, request_id=asked.request_id, run_id=run_id, tenant_id="acme",
            tool="refund", args_hash=asked.args_hash, decision="approve",
            expires_at=asked.expires_at, approver_id="fin").model_dump(mode="json"),
            tenant_id="acme")
        self.drive()

    def status(self, run_id: str, tenant: str = "acme") -> str:
        return self.engine.client.get_run(run_id, tenant_id=tenant).status


def play(world: World) -> Scene:
    """acme, first day: two metered runs, one over its model budget (escalated), one
    broken (dead), a refund approved after 10 minutes. Second day: a question (escalated),
    refunds approved after 20 and 50 minutes, one left to expire (dead), a reminder
    waiting. globex, first day: one metered run, one broken."""
    d = Driver(world)
    clock = world.clock
    first = (math.floor(clock.now() / DAY) + 1) * DAY + 3600
    clock.t = first
    broken = d.start("broken")
    runs = [d.start(f) for f in ("metered", "metered", "thrifty")]
    refund = d.start("refunds")
    globex = [d.start("metered", "globex"), d.start("broken", "globex")]
    d.drive()
    clock.advance(600)
    d.approve(refund)
    assert [d.status(r) for r in (broken, *runs, refund)] == [
        "dead", "completed", "completed", "escalated", "completed"]
    assert [d.status(r, "globex") for r in globex] == ["completed", "dead"]

    clock.t = first + DAY
    question = d.start("asking")
    soon, later, never = d.start("refunds"), d.start("refunds"), d.start("refunds")
    reminder = d.start("reminders")
    d.drive()
    clock.advance(1200)
    d.approve(soon)
    clock.advance(1800)
    d.approve(later)
    clock.advance(1000)  # past the last request's expiry (an hour)
    d.drive()
    assert [d.status(r) for r in (question, soon, later, never, reminder)] == [
        "escalated", "completed", "completed", "dead", "waiting"]
    return Scene(_date(first), _date(first + DAY),
                 {"acme": {broken, never}, "globex": {globex[1]}})


def _date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


@pytest.fixture
def scene(world: World) -> Iterator[Scene]:
    yield play(world)


def data(browser: httpx.Client, days: int | None = None) -> dict[str, Any]:
    r = browser.get("/charts/data", params={} if days is None else {"days": days})
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body: dict[str, Any] = r.json()
    return body


def day(f: dict[str, Any], date: str) -> dict[str, Any]:
    """The figures of one day, by name."""
    i = f["dates"].index(date)
    a = f["approvals"]
    return {
        "runs": {s: v[i] for s, v in f["runs"].items() if v[i]},
        "model_calls": f["model_calls"][i], "tokens_in": f["tokens_in"][i],
        "tokens_out": f["tokens_out"][i], "cost_usd": f["cost_usd"][i],
        "decided": a["decided"][i], "expired": a["expired"][i],
        "p50": a["wait_p50_s"][i], "p90": a["wait_p90_s"][i],
        "escalations": f["escalations"]["per_day"][i], "dead": f["dead_lettered"][i],
    }


QUIET = {"runs": {}, "model_calls": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0,
         "decided": 0, "expired": 0, "p50": None, "p90": None, "escalations": 0, "dead": 0}


def test_each_day_holds_the_tenants_numbers(world: World, scene: Scene) -> None:
    with sign_in(world, role="viewer") as browser:
        f = data(browser, 7)
    assert f["tenant"] == "acme" and f["days"] == 7 and len(f["dates"]) == 7
    assert f["dates"][-2:] == [scene.first, scene.second]
    assert day(f, scene.first) == {
        "runs": {"completed": 3, "escalated": 1, "dead": 1},
        "model_calls": 3, "tokens_in": 3 * TOKENS_IN, "tokens_out": 3 * TOKENS_OUT,
        "cost_usd": pytest.approx(3 * COST), "decided": 1, "expired": 0,
        "p50": 600.0, "p90": 600.0, "escalations": 1, "dead": 1,
    }
    assert day(f, scene.second) == {
        "runs": {"completed": 2, "escalated": 1, "dead": 1, "waiting": 1},
        "model_calls": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0,
        "decided": 2, "expired": 1, "p50": 1200.0, "p90": 3000.0, "escalations": 1,
        "dead": 1,
    }
    for date in f["dates"][:-2]:
        assert day(f, date) == QUIET
    assert f["escalations"]["by_cause"] == {"budget": 1, "question": 1}
    histogram = {b["label"]: b["count"] for b in f["approvals"]["histogram"]}
    assert histogram == {"< 1 min": 0, "1-5 min": 0, "5-15 min": 1, "15-60 min": 2,
                         "1-4 h": 0, "4-24 h": 0, "≥ 1 day": 0}
    assert f["approvals"]["window_p50_s"] == 1200.0
    assert {r["run_id"] for r in f["dead_now"]["runs"]} == scene.dead["acme"]
    assert f["dead_now"]["more"] is False
    assert f["read"]["unreadable"] == []
    # The journal's usage for the same window (GET /v1/usage) agrees with the days' sum.
    usage = world.call("GET", "/v1/usage", params={"since": f["since"]}, role="viewer").json()
    assert usage["model_calls"] == sum(f["model_calls"])
    assert usage["cost_usd"] == pytest.approx(math.fsum(f["cost_usd"]))
    assert usage["tokens_in"] + usage["tokens_out"] == sum(f["tokens_in"] + f["tokens_out"])


def test_another_tenant_sees_only_its_own(world: World, scene: Scene) -> None:
    with sign_in(world, tenant="globex", role="viewer") as browser:
        f = data(browser)
        page = browser.get("/charts").text
    assert f["tenant"] == "globex" and f["days"] == 30 and len(f["dates"]) == 30
    assert day(f, scene.first) == {
        **QUIET, "runs": {"completed": 1, "dead": 1}, "model_calls": 1,
        "tokens_in": TOKENS_IN, "tokens_out": TOKENS_OUT, "cost_usd": pytest.approx(COST),
        "dead": 1,
    }
    assert day(f, scene.second) == QUIET
    assert f["escalations"]["by_cause"] == {}
    assert {r["run_id"] for r in f["dead_now"]["runs"]} == scene.dead["globex"]
    for run_id in scene.dead["acme"]:
        assert run_id not in page
    assert "tenant <strong>globex</strong>" in page


@pytest.mark.parametrize("role", ["viewer", "approver", "operator", "admin"])
def test_every_console_role_sees_the_page(world: World, role: str) -> None:
    with sign_in(world, role=role) as browser:
        r = browser.get("/charts")
    assert r.status_code == 200 and "<h1>Metrics</h1>" in r.text
    assert '<a href="/charts" aria-current="page">Metrics</a>' in r.text


def test_the_page_draws_the_figures_as_svg(world: World, scene: Scene) -> None:
    with sign_in(world) as browser:
        r = browser.get("/charts?days=7")
    assert r.status_code == 200
    html = r.text
    assert html.count('<svg class="chart') == 7
    assert "No data in this window." not in html
    bars = re.findall(r'<rect class="bar ([\w-]+)"[^>]*><title>([^<]*)</title>', html)
    assert ("st-dead", f"{scene.first} · dead: 1") in bars
    assert ("st-completed", f"{scene.second} · completed: 2") in bars
    assert ("cost", f"{scene.first} · cost: $0.75") in bars
    assert ("p90", f"{scene.second} · 90th percentile: 50m") in bars
    assert ("escalation", "question: 1") in bars and ("escalation", "budget: 1") in bars
    assert ("dead", f"{scene.second} · dead-lettered: 1") in bars
    for run_id in scene.dead["acme"]:
        assert f'<a href="/runs/{run_id}">{run_id}</a>' in html
    assert '<option value="7" selected>' in html
    assert '<a href="/charts/data?days=7&amp;by=day">' in html


def test_an_empty_window_says_so(world: World) -> None:
    with sign_in(world) as browser:
        f = data(browser, 90)
        page = browser.get("/charts?days=90").text
    assert len(f["dates"]) == 90
    assert all(day(f, d) == QUIET for d in f["dates"])
    assert f["dead_now"] == {"runs": [], "more": False}
    assert f["read"] == {"runs": 0, "events": 0, "unreadable": []}
    assert "<svg class=\"chart" not in page
    assert page.count("No data in this window.") == 7
    assert "No run is dead." in page


BAD_WINDOW = ("days must be one of 1, 7, 30, 90, and by 'day' or 'hour' (by hour, at most 7 "
              "days)")


@pytest.mark.parametrize("days", ["13", "0", "-7", "7.5", "abc", "30days", "1" * 40])
def test_a_window_not_offered_is_a_400(world: World, days: str) -> None:
    with sign_in(world) as browser:
        page = browser.get("/charts", params={"days": days})
        assert page.status_code == 400
        assert "Bad window" in page.text and "days must be one of 1, 7, 30, 90" in page.text
        assert page.headers["content-security-policy"] == CONSOLE_CSP
        js = browser.get("/charts/data", params={"days": days})
        assert js.status_code == 400
        assert js.json() == {"error": "bad-window", "detail": BAD_WINDOW}


def test_the_page_needs_a_session(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as anonymous:
        r = anonymous.get("/charts?days=7", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Fcharts%3Fdays%3D7"
        assert anonymous.get("/charts/data", headers={"Accept": "application/json"}
                             ).status_code == 401
        # /metrics is still the app's Prometheus text, not a console page.
        prom = anonymous.get("/metrics")
        assert prom.status_code == 200 and prom.headers["content-type"].startswith("text/plain")


def test_no_inline_script_or_style(world: World, scene: Scene) -> None:
    with sign_in(world, role="admin") as browser:
        r = browser.get("/charts")
        assert r.headers["content-security-policy"] == CONSOLE_CSP
        html = r.text
        for tag in re.findall(r"<script\b[^>]*>", html):
            assert re.search(r'\bsrc="/static/[\w.]+"', tag), tag
        assert re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.S) == [""] * len(
            re.findall(r"<script\b", html))
        assert " style=" not in html and "<style" not in html
        assert not re.search(r"\son\w+=", html)
        for asset in ("/static/metrics.js", "/static/metrics.css"):
            got = browser.get(asset)
            assert got.status_code == 200 and got.headers["content-security-policy"] == CONSOLE_CSP
