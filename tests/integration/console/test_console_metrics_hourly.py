"""Metrics by hour, and approvals per approver role: after refunds approved, rejected and
left to expire at known hours of one day, the console's figures (``/charts/data``), the
API's (``GET /v1/activity``), the page and ``underway activity`` agree, hour by hour, on
SQLite and PostgreSQL.
A role's takeover rate is the share of its decided requests the person rejected."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime
from typing import Any, Literal

import pytest

import underway as uw
from fakes.console_browser import sign_in
from fakes.service_world import FLOWS, World
from underway.guard.approvals import sign_decision
from underway.runner import Runner

DAY, HOUR = 86_400, 3_600


def play(world: World) -> float:
    """Tomorrow (UTC) on the world's clock: at 02:00 three refunds ask for the finance
    role (each request expires after an hour). One is approved at 02:10, one rejected at
    02:30; the third expires, journaled at 03:00. Returns the day's start."""
    engine = uw.Engine(world.worker_store, flows=FLOWS, clock=world.clock)
    key = world.approver("acme", "fin", "finance")

    def drive() -> None:
        asyncio.run(Runner(engine).run_until_idle())

    def decide(run_id: str, decision: Literal["approve", "reject"]) -> None:
        asked = engine.client.state(run_id, tenant_id="acme").pending_approval
        assert asked is not None
        signed = sign_decision(key, request_id=asked.request_id, run_id=run_id,
                               tenant_id="acme", tool="refund", args_hash=asked.args_hash,
                               decision=decision, expires_at=asked.expires_at,
                               approver_id="fin")
        engine.submit_decision(signed.model_dump(mode="json"), tenant_id="acme")
        drive()

    day = (math.floor(world.clock.now() / DAY) + 1) * DAY
    world.clock.t = day + 2 * HOUR
    runs = [world.start("refunds", f"INV-{i}", drive=False) for i in range(3)]
    drive()
    world.clock.advance(600)
    decide(runs[0], "approve")
    world.clock.advance(1200)
    decide(runs[1], "reject")
    world.clock.t = day + 3 * HOUR
    drive()
    assert engine.client.get_run(runs[2], tenant_id="acme").status != "waiting"
    return day


def figures(world: World, **params: Any) -> dict[str, Any]:
    with sign_in(world, role="viewer") as browser:
        r = browser.get("/charts/data", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


FINANCE = {"role": "finance", "approved": 1, "rejected": 1, "expired": 1, "decided": 2,
           "takeover_rate": 0.5, "wait_p50_s": 600.0, "wait_p90_s": 1800.0}


def test_each_hour_holds_its_numbers_and_each_role_its_takeover_rate(world: World) -> None:
    day = play(world)
    f = figures(world, days=1, by="hour")
    assert f["by"] == "hour" and f["since"] == day and f["until"] == day + DAY
    assert len(f["dates"]) == 24 and f["dates"][2].endswith(" 02:00")
    a = f["approvals"]
    assert a["decided"] == [0, 0, 2] + [0] * 21
    assert a["expired"] == [0, 0, 0, 1] + [0] * 20
    assert a["wait_p50_s"][2] == 600.0 and a["wait_p90_s"][2] == 1800.0
    assert [sum(v[h] for v in f["runs"].values()) for h in range(24)] == [0, 0, 3] + [0] * 21
    assert a["by_role"] == [FINANCE]

    # The same window by day: one bucket, the same totals and the same roles.
    daily = figures(world, days=1, by="day")
    assert daily["by"] == "day" and len(daily["dates"]) == 1
    assert daily["approvals"]["decided"] == [2] and daily["approvals"]["expired"] == [1]
    assert daily["approvals"]["by_role"] == [FINANCE]

    # The API gives the console's figures.
    r = world.call("GET", "/v1/activity", params={"days": 1, "by": "hour"}, role="viewer")
    assert r.status_code == 200, r.text
    assert r.json() == f

    # The page shows the hour and the role's row.
    with sign_in(world, role="viewer") as browser:
        page = browser.get("/charts", params={"days": 1, "by": "hour"}).text
    assert "Runs created per hour" in page and '<option value="hour" selected>' in page
    row = page.split('<tr data-role="finance">', 1)[1].split("</tr>", 1)[0]
    cells = [c.split("</td>")[0] for c in row.split("<td>")[1:]]
    assert cells == ["finance", "2", "1", "1", "1", "50%", "10m", "30m"]


@pytest.mark.parametrize("params", [{"days": 30, "by": "hour"}, {"days": 1, "by": "week"}])
def test_an_hourly_window_longer_than_a_week_is_refused(world: World,
                                                        params: dict[str, Any]) -> None:
    r = world.call("GET", "/v1/activity", params=params, role="viewer")
    assert r.status_code in (400, 422), r.text
    assert ("days" if params["by"] == "hour" else "by") in r.text
    with sign_in(world, role="viewer") as browser:
        page = browser.get("/charts", params=params)
    assert page.status_code == 400 and "by hour, at most 7 days" in page.text


def test_the_cli_counts_the_same_hours_and_roles(world: World) -> None:
    from typer.testing import CliRunner

    from underway.cli import app

    day = play(world)
    first = datetime.fromtimestamp(day, UTC).strftime("%Y-%m-%d")
    args = ["activity", "--from", first, "--days", "1", "--by", "hour", "--tenant", "acme",
            "--db", world.store_url]
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert found["since"] == day and len(found["buckets"]) == 24
    assert [len(b["approval_waits"]) for b in found["buckets"][:4]] == [0, 0, 2, 0]
    assert found["roles"]["finance"]["takeover_rate"] == 0.5
    assert found["roles"]["finance"]["expired"] == 1
    text = CliRunner().invoke(app, args).stdout
    assert f"{first} 02:00" in text
    [row] = [line for line in text.splitlines() if line.startswith("finance")]
    assert row.split() == ["finance", "2", "1", "1", "1", "50%", "10m"]
    refused = CliRunner().invoke(app, ["activity", "--days", "30", "--by", "hour",
                                       "--db", world.store_url])
    assert refused.exit_code == 2 and "at most 7" in refused.stderr
