"""The console's bulk form, on a real server over SQLite and a real PostgreSQL: from the
runs list, a dry run with the count and the first ids, then a confirming post that acts
on each run of the filter once; CSRF, roles and tenants as on the other forms."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

from fakes import bulk_flows
from fakes.console_browser import csrf_of, sign_in
from fakes.service_world import World
from underway import events as ev


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    w = World(db_url)
    for flow in bulk_flows.FLOWS:
        w.engine.register(flow)
    bulk_flows.OUTAGE[0] = True
    yield w
    w.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                       else "pg_url"))


def start(world: World, flow: str, n: int, tenant: str = "acme") -> list[str]:
    ids = [world.call("POST", "/v1/runs", tenant=tenant, role="operator",
                      json={"flow": flow, "input": {"sku": f"SKU-{i}"}}).json()["run_id"]
           for i in range(n)]
    world.drive()
    return ids


def status(world: World, run_id: str, tenant: str = "acme") -> str:
    row = world.store.get_run(tenant, run_id)
    assert row is not None
    return row.status


def count(page: str, outcome: str) -> int:
    found = re.search(rf'data-count="{outcome}">(\d+)<', page)
    assert found, page
    return int(found.group(1))


def test_an_operator_resumes_the_filtered_runs_after_a_dry_run(world: World) -> None:
    dead = start(world, "brittle", 9)
    asking = start(world, "asking", 2)
    with sign_in(world, role="operator") as browser:
        page = browser.get("/runs", params={"status": "dead", "flow": "brittle"}).text
        # The form acts on the page's own filter: its query.
        assert 'action="/runs/bulk?status=dead&amp;flow=brittle" id="bulk-form"' in page
        form = {"csrf": csrf_of(page), "action": "resume"}
        dry = browser.post("/runs/bulk", params={"status": "dead", "flow": "brittle"},
                           data=form)
        assert dry.status_code == 200, dry.text
        assert "dry run" in dry.text and "Nothing was sent." in dry.text
        assert count(dry.text, "eligible") == 9
        assert all(run_id in dry.text for run_id in dead)
        assert 'id="bulk-confirm"' in dry.text
        world.drive()
        assert {status(world, r, "acme") for r in dead} == {"dead"}

        bulk_flows.OUTAGE[0] = False
        form_html = dry.text.split('id="bulk-confirm"', 1)[0].rsplit("<form", 1)[1]
        target = re.search(r'action="([^"]+)"', form_html)
        assert target and html.unescape(target.group(1)) == (
            "/runs/bulk?status=dead&flow=brittle")
        confirm = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">',
                                  dry.text.split('id="bulk-confirm"', 1)[1]))
        done = browser.post(html.unescape(target.group(1)),
                            data={k: html.unescape(v) for k, v in confirm.items()})
        assert done.status_code == 200, done.text
        assert count(done.text, "done") == 9
    world.drive()
    for run_id in dead:
        history = [r.event for r in world.engine.journal.history("acme", run_id)]
        assert [e.by for e in history if isinstance(e, ev.RunResumed)] == [
            "apikey:acme-operator"]
        assert status(world, run_id, "acme") == "completed"
    assert {status(world, r, "acme") for r in asking} == {"escalated"}


def test_the_bulk_form_is_refused_without_csrf_role_or_an_action(world: World) -> None:
    dead = start(world, "brittle", 2)
    theirs = start(world, "brittle", 1, tenant="globex")
    with sign_in(world, role="viewer") as browser:
        page = browser.get("/runs").text
        assert 'id="bulk-form"' not in page
        r = browser.post("/runs/bulk", data={"csrf": csrf_of(page), "action": "cancel",
                                             "confirm": "yes"})
        assert r.status_code == 403
    with sign_in(world, role="operator") as browser:
        csrf = csrf_of(browser.get("/runs").text)
        assert browser.post("/runs/bulk", data={"action": "cancel",
                                                "confirm": "yes"}).status_code == 403
        bad = browser.post("/runs/bulk", data={"csrf": csrf, "action": "answer"})
        assert bad.status_code == 422 and "/approvals/bulk" in bad.text
        r = browser.post("/runs/bulk", data={"csrf": csrf, "action": "cancel",
                                             "reason": "recall", "confirm": "yes"})
        assert r.status_code == 200 and count(r.text, "done") == 2
        assert theirs[0] not in r.text
    world.drive()
    for run_id in dead:
        assert status(world, run_id, "acme") == "cancelled"
    assert status(world, theirs[0], "globex") == "dead"


def test_where_resolutions_are_signed_the_console_refuses_a_bulk_resume(world: World) -> None:
    dead = start(world, "brittle", 2)
    world.app.state.underway.client.signed_resolutions = True
    with sign_in(world, role="operator") as browser:
        csrf = csrf_of(browser.get("/runs").text)
        r = browser.post("/runs/bulk", data={"csrf": csrf, "action": "resume",
                                             "confirm": "yes"})
        assert r.status_code == 409
        assert "an unsigned bulk resume is refused here" in html.unescape(r.text)
    assert all(world.store.pending_signals("acme", x) == [] for x in dead)
