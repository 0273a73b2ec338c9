"""Run labels on the console's server-rendered pages (SQLite and PostgreSQL): the runs list
has a column per label and a label filter (several AND together), each cell links to the
runs with that label, the approvals inbox shows the labels of the runs that wait, a
sensitive label reads ``[redacted]`` unless the reader reveals it, values are text never
markup, and a bad filter is said on the page."""

from __future__ import annotations

import html
import re
from typing import Any

from fakes.console_browser import sign_in
from fakes.service_world import World


def start(world: World, flow: str, invoice: str, labels: dict[str, Any],
          **body: Any) -> str:
    r = world.call("POST", "/v1/runs", role="operator", json={
        "flow": flow, "input": {"invoice": invoice, "amount": 5}, "labels": labels, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def rows(page: str, table: str = "runs") -> dict[str, dict[str, str]]:
    """Each row's label cells by label name, by the run id its first cell links to."""
    body = page.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    found: dict[str, dict[str, str]] = {}
    for row in re.findall(r"<tr.*?</tr>", body, re.S)[1:]:
        run = re.search(r'href="/(?:runs|approvals)/([^"]+)"', row)
        if run is None:
            continue
        cells = re.findall(r'data-label="([^"]+)">(.*?)</td>', row, re.S)
        found[run.group(1)] = {k: html.unescape(re.sub(r"<[^>]+>", "", v)).strip()
                               for k, v in cells}
    return found


def test_the_runs_list_shows_and_filters_by_labels(world: World) -> None:
    a = start(world, "reminders", "INV-1", {"sku": "A-7", "qty": 3, "rush": True})
    b = start(world, "reminders", "INV-2", {"sku": "B-1", "qty": 3})
    c = start(world, "reminders", "INV-3", {"note": "<b>bold</b>"})
    world.drive()
    with sign_in(world) as browser:
        page = browser.get("/runs").text
        assert re.search(r'<th class="label" scope="col">qty</th>', page)
        shown = rows(page)
        assert shown[a] == {"note": "—", "qty": "3", "rush": "true", "sku": "A-7"}
        assert shown[b]["sku"] == "B-1" and shown[b]["rush"] == "—"
        # A value is text, never markup.
        assert shown[c]["note"] == "<b>bold</b>" and "<b>bold</b>" not in page
        assert '<a href="/runs?label=sku%3DA-7">A-7</a>' in page
        assert set(rows(browser.get("/runs", params={"label": "qty=3"}).text)) == {a, b}
        both = browser.get("/runs", params={"label": "qty=3, sku=B-1"}).text
        assert set(rows(both)) == {b}
        assert 'value="qty=3, sku=B-1"' in both
        repeated = browser.get("/runs", params=[("label", "qty=3"), ("label", "rush=true")])
        assert set(rows(repeated.text)) == {a}
        none = browser.get("/runs", params={"label": "sku=Z-0"}).text
        assert rows(none) == {} and "No runs match." in none
        bad = browser.get("/runs", params={"label": "9x=1"})
        assert bad.status_code == 200
        assert "bad label name &#39;9x&#39;" in bad.text and rows(bad.text) == {}


def test_the_inbox_shows_the_labels_of_the_runs_that_wait(world: World) -> None:
    held = start(world, "refunds", "INV-7", {"customer": "Asha Rao", "amount_inr": 232000},
                 sensitive_labels=["customer"])
    start(world, "reminders", "INV-8", {"sku": "A-7"})
    world.drive()
    with sign_in(world, role="approver") as browser:
        page = browser.get("/approvals").text
        assert rows(page, "requests")[held] == {"amount_inr": "232000",
                                               "customer": "[redacted]"}
        assert "Asha Rao" not in page
        listed = browser.get("/runs").text
        assert rows(listed)[held]["customer"] == "[redacted]" and "Asha Rao" not in listed
    with sign_in(world, role="admin") as browser:
        revealed = browser.get("/approvals", params={"reveal": "1", "purpose": "refunds"})
        assert revealed.status_code == 200, revealed.text
        assert rows(revealed.text, "requests")[held]["customer"] == "Asha Rao"
