"""``underway eval`` and ``underway drift`` on a real database: the figures as text, JSON and
a self-contained HTML file; drift's exit status with ``--fail-on-drift`` and its notice
through the config file's webhook; bad options named; each read in the access log."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakes.receivers import Endpoint
from fakes.seeded_journals import SHIFTS, Behaviour, Seeder, seed_periods
from underway.cli import app
from underway.store import connect

UNTIL = 1_800_000_000.0
UNTIL_ISO = datetime.fromtimestamp(UNTIL, UTC).isoformat()


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, list(args))
    return done.exit_code, done.stdout, done.stderr


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    found = Endpoint()
    yield found
    found.close()


def seeded(url: str, *, shifted: bool) -> None:
    store = connect(url)
    try:
        usual = Behaviour()
        seed_periods(Seeder(store), until=UNTIL, baseline=usual,
                     window=usual.shifted(**SHIFTS["tool_error_rate"]) if shifted else usual)
    finally:
        store.close()


def test_eval_prints_the_figures_as_text_json_and_html(sqlite_url: str,
                                                        tmp_path: Path) -> None:
    seeded(sqlite_url, shifted=False)
    code, out, _ = run("eval", "--db", sqlite_url, "--until", UNTIL_ISO, "--by", "ana")
    assert code == 0, out
    assert "runs             120 started: 120 completed" in out
    assert re.search(r"read 120 runs: [\d,]+ events of \d+ kinds", out)
    assert "executed-unsafe  0" in out and "per tool:" in out

    page = tmp_path / "report.html"
    code, out, _ = run("eval", "--db", sqlite_url, "--json", "--html", str(page),
                       "--flow", "agent", "--since", "2026-12-01")
    assert code == 0
    figures = json.loads(out)
    assert figures["outcomes"]["started"] == 120 and figures["flow"] == "agent"
    assert figures["outcomes"]["completion_rate"] == 1.0
    assert figures["safety"]["executed_unsafe"] == 0
    assert {t["tool"] for t in figures["tools"]} == {"lookup", "send", "refund"}
    html = page.read_text()
    assert html.startswith("<!doctype html>") and html.count("<svg class=\"chart") >= 4
    assert "<script" not in html and "http" not in html.split("<body>", 1)[1]

    code, out, _ = run("access-log", "--db", sqlite_url)
    assert code == 0 and "cli eval" in out and "ana" in out


def test_drift_reports_a_shift_and_fails_when_asked(sqlite_url: str) -> None:
    seeded(sqlite_url, shifted=True)
    code, out, _ = run("drift", "--db", sqlite_url, "--until", UNTIL_ISO)
    assert code == 0
    assert re.search(r"tool_error_rate\s+\d\.\d%\s+2\d\.\d%.*DRIFTED", out)
    assert out.rstrip().endswith(
        "metrics drifted: " + ", ".join(sorted(re.findall(r"^\s+(\S+) .*DRIFTED$", out,
                                                          re.M), key=lambda m: m)))
    code, out, _ = run("drift", "--db", sqlite_url, "--until", UNTIL_ISO,
                       "--fail-on-drift", "--json")
    assert code == 1
    assert "tool_error_rate" in json.loads(out)["drifted"]
    code, _, _ = run("drift", "--db", sqlite_url, "--until", UNTIL_ISO, "--fail-on-drift",
                     "--threshold", "tool_error_rate=0.5")
    assert code == 0


def test_drift_with_nothing_moved_says_so_and_passes(sqlite_url: str) -> None:
    seeded(sqlite_url, shifted=False)
    code, out, _ = run("drift", "--db", sqlite_url, "--until", UNTIL_ISO, "--baseline",
                       "4w", "--window", "24h", "--fail-on-drift")
    assert code == 0 and out.rstrip().endswith("0 metrics drifted")


def test_drift_notifies_through_the_configured_webhook(sqlite_url: str, tmp_path: Path,
                                                        endpoint: Endpoint) -> None:
    seeded(sqlite_url, shifted=True)
    config = tmp_path / "underway.toml"
    config.write_text(f'[notifier.webhook]\nurl = "{endpoint.url}"\n')
    code, _, err = run("drift", "--db", sqlite_url, "--until", UNTIL_ISO, "--notify",
                       "--config", str(config))
    assert code == 0, err
    assert "notice sent" in err
    ((_, body),) = endpoint.received
    notice = json.loads(body)
    assert notice["kind"] == "drift" and notice["run_id"] == "*"
    assert "tool_error_rate" in notice["question"]
    assert "tool_error_rate" in notice["evidence"]["drifted"]


def test_drift_sends_nothing_when_nothing_drifted(sqlite_url: str, tmp_path: Path,
                                                  endpoint: Endpoint) -> None:
    seeded(sqlite_url, shifted=False)
    config = tmp_path / "underway.toml"
    config.write_text(f'[notifier.webhook]\nurl = "{endpoint.url}"\n')
    code, _, _ = run("drift", "--db", sqlite_url, "--until", UNTIL_ISO, "--notify",
                     "--config", str(config))
    assert code == 0 and endpoint.received == []


@pytest.mark.parametrize(("args", "message"), [
    (["drift", "--window", "0d"], "--window '0d' is not a duration"),
    (["drift", "--baseline", "month"], "--baseline 'month' is not a duration"),
    (["drift", "--threshold", "speed=2"], "--threshold 'speed=2': give NAME=VALUE"),
    (["drift", "--threshold", "tool_error_rate=high"], "'high' is not a number"),
    (["drift", "--notify"], "--notify needs a [notifier]"),
    (["eval", "--since", "yesterday"], "--since 'yesterday' is not a time"),
    (["eval", "--since", "2027-01-02", "--until", "2027-01-01"], "the window is empty"),
])
def test_bad_options_are_named(sqlite_url: str, args: list[str], message: str,
                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no underway.toml here
    connect(sqlite_url).close()
    code, _, err = run(*args, "--db", sqlite_url)
    assert code == 2 and message in err
