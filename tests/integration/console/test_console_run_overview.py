"""A run's page beyond its event log: one row per step attempt with the worker that ran it
(journaled on the attempt's ``StepStarted``), its duration, its calls and the wait it
ended in, its events one click away; the graph of its steps and the transitions it took
(every declared step when the server has the flow's code); a dead run's page that keeps
its resolution link and does not say "live"; the facts the page's script fetches; and the
same rows printed by ``underway runs show``."""

from __future__ import annotations

import html
import re
from itertools import pairwise

import httpx
from typer.testing import CliRunner

from fakes.clinic_flows import MESSAGE, PATIENT, confirmed_visit, start
from fakes.console_browser import sign_in
from fakes.service_world import World
from underway import Client
from underway.cli import app as cli
from underway.events import StepCompleted, StepStarted
from underway.service.console._overview import ROWS
from underway.service.console._run import OVERVIEW_EVENTS

WORKER_A = "host-a:0f0f0f0f0f0f:101:5"
WORKER_B = "host-b:0e0e0e0e0e0e:202:7"


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _rows(page: str) -> list[dict[str, str]]:
    """Each Gantt row of a page: its events, title, worker (and owner id), duration and
    the text of what opens under it."""
    found = []
    for m in re.finditer(r'<li class="g-row[^"]*" id="a-\d+" data-seqs="(\d+)-(\d+)">(.*?)'
                         r"</details>\s*</li>", page, re.S):
        body = m.group(3)
        head, more = body.split("</summary>", 1)
        worker = re.search(r'class="g-worker muted" title="([^"]*)">([^<]*)<', head)
        assert worker is not None
        title = re.search(r'class="g-title">(.*?)</span>\s*<span class="g-worker', head, re.S)
        took = re.search(r'class="g-took mono">([^<]*)<', head)
        assert title is not None and took is not None
        found.append({
            "first": m.group(1), "last": m.group(2),
            "title": " ".join(_text(title.group(1)).split()),
            "owner": html.unescape(worker.group(1)), "worker": worker.group(2),
            "took": _text(took.group(1)), "more": " ".join(_text(more).split()),
        })
    return found


def test_each_step_attempt_is_a_row_with_its_worker_durations_and_events(world: World) -> None:
    run_id = confirmed_visit(world)
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{run_id}").text
    rows = _rows(page)
    # The rows cover every event of the journal once, in order.
    head = len(Client(world.store).events(run_id, tenant_id="acme"))
    assert rows[0]["first"] == "1"
    assert all(int(a["last"]) + 1 == int(b["first"]) for a, b in pairwise(rows))
    assert int(rows[-1]["last"]) == head
    run, remind, confirm, close = rows
    assert run["title"] == "run" and run["owner"] == ""
    assert remind["title"] == "step remind -> confirm"
    assert (remind["owner"], remind["worker"]) == (WORKER_A, "host-a pid 101")
    assert (confirm["owner"], confirm["worker"]) == (WORKER_B, "host-b pid 202")
    assert close["title"] == "step close -> end"
    # Opened, a row shows its calls and its wait with their durations, then its events.
    assert "tool send_sms #0 ok:" in remind["more"] and MESSAGE[:10] in remind["more"]
    assert "model clinic-model-1 #1 40+12 tokens" in remind["more"]
    assert "waiting for a timer, then timer fired 31s" in remind["more"]
    assert ("waiting for signal 'confirmed', then signal 'confirmed' from "
            "apikey:acme-operator 45s") in confirm["more"]
    assert PATIENT in confirm["more"]  # the signal's payload, in Hindi, as text
    assert "run completed" in close["more"]
    # The raw events are a click away: each row links to its first event in the log.
    assert f'href="?page=1#e-{remind["first"]}"' in page
    assert f'id="e-{remind["first"]}"' in page
    # The workers line says who ran how many attempts, with their owner ids.
    workers = " ".join(_text(page.split('id="workers"', 1)[1].split("</p>", 1)[0]).split())
    assert "host-a pid 101 (1 attempt), host-b pid 202 (2 attempts)" in workers
    assert f'title="{WORKER_A}"' in page and f'title="{WORKER_B}"' in page


def test_the_worker_of_each_attempt_is_journaled(world: World) -> None:
    run_id = confirmed_visit(world)
    started = [r.event for r in Client(world.store).events(run_id, tenant_id="acme")
               if isinstance(r.event, StepStarted)]
    assert [(e.step, e.worker) for e in started] == [
        ("remind", WORKER_A), ("confirm", WORKER_B), ("close", WORKER_B)]
    # The API's events carry it too.
    events = world.call("GET", f"/v1/runs/{run_id}/events").json()
    assert [e["data"].get("worker") for e in events if e["type"] == "StepStarted"] == [
        WORKER_A, WORKER_B, WORKER_B]


def _graph(page: str) -> str:
    return page.split('<svg class="graph"', 1)[1].split("</svg>", 1)[0]


def test_the_graph_shows_the_steps_and_the_transitions_taken(world: World) -> None:
    run_id = confirmed_visit(world)
    with sign_in(world) as browser:
        graph = _graph(browser.get(f"/runs/{run_id}").text)
    nodes = re.findall(r'<g class="node ([^"]*)"><title>([^<]*)</title>', graph)
    # This server has no flow code: the steps the run took, in order, and its end.
    # A step's node says what it waited on (a sleep is its edge's, not the step's).
    assert [(html.unescape(t), c) for c, t in nodes] == [
        ("remind", "taken"), ("confirm: signal 'confirmed'", "taken"), ("close", "taken"),
        ("end · completed", "end ended-completed")]
    assert '<text class="about"' in graph and "signal 'confirmed'</text>" in html.unescape(graph)
    edges = [(html.unescape(t), html.unescape(x)) for t, x in re.findall(
        r'<g class="edge"><title>([^<]*)</title>.*?<text[^>]*>([^<]*)</text>', graph)]
    # Each transition with how often it was taken and what the run waited on between.
    assert edges == [("remind → confirm: taken 1 time", "1x · a timer"),
                     ("confirm → close: taken 1 time", "1x · signal 'confirmed'"),
                     ("close → end: taken 1 time", "1x")]


def test_with_the_flows_code_the_graph_shows_the_steps_not_taken(db_url: str) -> None:
    from fakes import clinic_flows

    with World(db_url) as world:
        world.app.state.underway.client.flows.update({f.name: f for f in clinic_flows.FLOWS})
        run_id = start(world, "clinic", WORKER_A)
        with sign_in(world) as browser:
            page = browser.get(f"/runs/{run_id}").text
    graph = _graph(page)
    nodes = [(html.unescape(t), c) for c, t in re.findall(
        r'<g class="node ([^"]*)"><title>([^<]*)</title>', graph)]
    # Declared order; the run sleeps before confirm, so confirm is where it is.
    assert nodes == [("remind", "taken"), ("confirm", "untaken current"),
                     ("call_patient", "untaken"), ("close", "untaken"), ("end", "end")]
    assert "The flow&#39;s steps as its code declares them" in page or \
        "The flow's steps as its code declares them" in page


def test_a_dead_runs_page_keeps_its_resolution_link_and_is_not_live(world: World) -> None:
    run_id = start(world, "doomed", WORKER_A)
    assert world.call("GET", f"/v1/runs/{run_id}").json()["status"] == "dead"
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{run_id}").text
        facts = browser.get(f"/runs/{run_id}/facts")
    assert 'id="live"' not in page and 'data-stream=""' in page
    assert "stopped: an operator resumes or resolves it" in _text(page)
    link = f'<a id="facts-request" href="/approvals/{run_id}">open the request</a>'
    assert link in page
    # The facts the script fetches when the status changes keep the same link.
    assert facts.status_code == 200 and facts.headers["cache-control"] == "no-store"
    assert link in facts.text
    assert f"ValueError: cannot read the visit of {PATIENT}" in html.unescape(facts.text)
    # The Gantt row of the step says it died, and the wait for an operator is open.
    (_, parse) = _rows(page)
    assert parse["title"] == "step parse dead" and "waiting for an operator" in parse["more"]
    assert parse["took"] != ""
    edges = [(html.unescape(t), html.unescape(x)) for t, x in re.findall(
        r'<g class="edge"><title>([^<]*)</title>.*?<text[^>]*>([^<]*)</text>', _graph(page))]
    assert edges == [("parse → end: taken 1 time", "1x · dead")]
    assert '<g class="node end ended-dead"><title>end · dead</title>' in _graph(page)


def test_the_facts_fragment_is_a_read_of_the_tenant_in_the_access_log(
    world: World,
) -> None:
    run_id = start(world, "doomed", WORKER_A)
    with httpx.Client(base_url=world.server.url) as stranger:
        r = stranger.get(f"/runs/{run_id}/facts", headers={"Accept": "*/*"})
        assert r.status_code == 401 and run_id not in r.text
    with sign_in(world, "globex") as other:
        assert other.get(f"/runs/{run_id}/facts").status_code == 404
    assert world.store.list_access("acme") == []
    with sign_in(world) as browser:
        assert browser.get(f"/runs/{run_id}/facts?purpose=support").status_code == 200
    reads = world.store.list_access("acme", limit=1000)
    assert [(a.run_id, a.key_name, a.endpoint, a.purpose) for a in reads] == [
        (run_id, "acme-viewer", "GET /runs/{run_id}/facts", "support")]


def test_a_loop_is_one_edge_and_a_long_run_shows_its_newest_attempts(world: World) -> None:
    from fakes.journey_flows import start as start_laps

    run_id = start_laps(world, "laps", {"laps": 160})
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{run_id}").text
    edges = [(html.unescape(t), html.unescape(x)) for t, x in re.findall(
        r'<g class="edge"><title>([^<]*)</title>.*?<text[^>]*>([^<]*)</text>', _graph(page))]
    assert edges == [("lap → lap: taken 159 times", "159x"), ("lap → end: taken 1 time", "1x")]
    rows = _rows(page)
    # 161 rows in all (the run's first events, then 160 attempts): the newest shown.
    assert len(rows) == ROWS and f"The {161 - ROWS} oldest attempts are left out." in _text(page)
    head = len(Client(world.store).events(run_id, tenant_id="acme"))
    assert rows[-1]["title"] == "step lap -> end" and int(rows[-1]["last"]) == head
    assert all(r["title"] == "step lap -> lap" for r in rows[:-1])


def test_a_run_longer_than_the_overview_reads_says_where_it_starts(world: World) -> None:
    from fakes.journey_flows import start as start_laps

    run_id = start_laps(world, "laps", {"laps": 400})
    head = len(Client(world.store).events(run_id, tenant_id="acme"))
    first = head - OVERVIEW_EVENTS + 1
    with sign_in(world) as browser:
        page = browser.get(f"/runs/{run_id}").text
    text = " ".join(_text(page).split())
    assert f"the rows start at event {first} (older events are in the event log)" in text
    assert f"and the transitions it took from event {first} on" in text
    # The transitions counted are the ones in the events read: one per step completed.
    steps = sum(1 for e in Client(world.store).events(run_id, tenant_id="acme")
                if e.seq >= first and isinstance(e.event, StepCompleted))
    edges = [(html.unescape(t), html.unescape(x)) for t, x in re.findall(
        r'<g class="edge"><title>([^<]*)</title>.*?<text[^>]*>([^<]*)</text>', _graph(page))]
    assert edges == [(f"lap → lap: taken {steps - 1} times", f"{steps - 1}x"),
                     ("lap → end: taken 1 time", "1x")]
    # The newest page of the event log is still the one it opens on.
    assert f'id="e-{head}"' in page


def test_runs_show_prints_a_row_per_attempt_with_its_worker_and_durations(
    world: World,
) -> None:
    run_id = confirmed_visit(world)
    shown = CliRunner().invoke(cli, ["runs", "show", run_id, "--tenant", "acme",
                                     "--db", world.store_url])
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "workers  host-a pid 101 (1 attempt), host-b pid 202 (2 attempts)" in out
    rows = {line.split()[0]: line for line in out.splitlines()
            if re.match(r"\s*\d+-\d+ ", line)}
    assert list(rows) == ["1-2", "3-9", "10-14", "15-17"]
    assert rows["3-9"].endswith("step remind -> confirm, 2 calls, worker host-a pid 101")
    assert rows["10-14"].endswith("step confirm -> close, worker host-b pid 202")
    assert "waiting for a timer: 31s, then timer fired" in out
    assert ("waiting for signal 'confirmed': 45s, then signal 'confirmed' from "
            "apikey:acme-operator") in out
    assert PATIENT in out and MESSAGE[:20] in out  # Hindi and Tamil, as they are
    # --events prints every event, the worker of each attempt among its fields' lines.
    every = CliRunner().invoke(cli, ["runs", "show", run_id, "--tenant", "acme", "--events",
                                     "--db", world.store_url]).output
    assert len([x for x in every.splitlines() if re.match(r"\s*\d+  \d{4}-", x)]) == 17
    assert "step confirm, attempt 1" in every
