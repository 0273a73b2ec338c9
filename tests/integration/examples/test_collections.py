"""The invoice-collections example end to end: real `underway worker` processes (one killed
with SIGKILL right after a reminder went out), the real approvals CLI, on SQLite and on
PostgreSQL. Every check reads the journal or the simulated services' records."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.collections_agent import app as collections_app  # noqa: E402
from examples.collections_agent import demo as demo_module  # noqa: E402
from examples.collections_agent.brain_server import MODEL_ID as BRAIN_MODEL_ID  # noqa: E402
from examples.collections_agent.brain_server import BrainServer  # noqa: E402
from examples.collections_agent.report import Findings  # noqa: E402
from examples.collections_agent.scenario import Crash, Resumption, Scenario  # noqa: E402

import underway as uw  # noqa: E402
from underway import events as ev  # noqa: E402
from underway.apikeys import authenticate  # noqa: E402
from underway.crypto import KeyringFile, encrypt  # noqa: E402
from underway.errors import ConfigurationError  # noqa: E402
from underway.journal.state import request_id_for  # noqa: E402
from underway.store import connect  # noqa: E402

DEMO = ROOT / "examples" / "collections_agent" / "demo.py"
DAY = 0.3
"""Seconds per simulated day: the agents' three-day waits take 0.9 s."""


@pytest.fixture
def scenario(db: str, tmp_path: Path) -> Iterator[Scenario]:
    data = tmp_path / "data"
    data.mkdir()
    story = Scenario(data, db, day_seconds=DAY)
    yield story
    story.close()


@pytest.mark.crash
def test_agents_survive_sigkill_and_move_money_only_with_approval(scenario: Scenario) -> None:
    scenario.start_services()

    taken = scenario.take_in()
    actions = [(event.entity_id, result.action) for event, result in taken]
    assert actions == [("INV-2041", "started"), ("INV-2042", "started"),
                       ("INV-2042", "duplicate"), ("INV-2043", "started")]
    assert taken[2][1].run_id == taken[1][1].run_id

    crash: Crash = scenario.crash_worker()
    assert crash.intent.tool == "send_reminder"
    resumed: Resumption = scenario.resume(crash)
    assert isinstance(resumed.outcome, ev.ToolSucceeded)
    assert resumed.outcome.result["message_id"] == crash.message_id
    assert (resumed.requests, resumed.deliveries) == (2, 1)

    held = scenario.held_for_approval()
    scenario.approve(held)
    found = scenario.finish()

    assert found.violations == []
    by_invoice = {r.invoice_id: r for r in found.runs}
    assert {i: (r.state.status, r.outcome) for i, r in by_invoice.items()} == {
        "INV-2041": ("completed", "paid"),
        "INV-2042": ("completed", "paid"),
        "INV-2043": ("completed", "handed_to_collections"),
    }
    assert held == by_invoice["INV-2042"].state.run_id
    assert found.paid == ["INV-2041", "INV-2042"]
    assert all(r.audit.ok for r in found.runs)
    _no_message_twice(found, crash)
    _money_only_as_policy_allows(found)
    _guards_refused_what_they_must(found)
    _models_asked_once_per_turn(found)


def _no_message_twice(found: Findings, crash: Crash) -> None:
    keys = [m["key"] for m in found.messages]
    assert len(keys) == len(set(keys)) == 7
    assert Counter(m["invoice_id"] for m in found.messages) == {
        "INV-2041": 2, "INV-2042": 2, "INV-2043": 3}
    journaled = [e.key for r in found.runs for e in r.events(ev.ToolSucceeded)
                 if e.tool == "send_reminder"]
    assert sorted(journaled) == sorted(keys)
    assert Counter(found.send_requests) - Counter(keys) == Counter({crash.intent.key: 1})
    assert sum(r.state.messages for r in found.runs) == 7
    # What `underway eval` reads of it: one step taken over after the SIGKILL, the lost
    # send settled by running it again under its key, no effect twice.
    e = found.evaluation
    assert (e.recovery.takeovers, e.effects.unknown_outcomes, e.effects.settled) == (
        1, {"takeover": 1}, {"rerun": 1})
    assert e.effects.duplicates == []
    assert e.outcomes.completed == e.outcomes.started == 3


def _money_only_as_policy_allows(found: Findings) -> None:
    moved = {(m["kind"], m["invoice_id"], Decimal(m["amount"])): m["key"] for m in found.money}
    assert set(moved) == {("refund", "INV-2041", Decimal("450.00")),
                          ("write_off", "INV-2042", Decimal("9600.00"))}
    requested = [(r.invoice_id, a.tool, a.required_role) for r in found.runs
                 for a in r.events(ev.ApprovalRequested)]
    assert requested == [("INV-2042", "write_off", "finance")]
    write_off = next(r for r in found.runs if r.invoice_id == "INV-2042")
    granted = write_off.events(ev.ApprovalGranted)
    key = moved[("write_off", "INV-2042", Decimal("9600.00"))]
    assert [(g.request_id, g.approver_id) for g in granted] == [(request_id_for(key), "priya")]
    taken = found.evaluation.takeover
    assert taken.approvals_requested == taken.approvals_granted == 1
    assert taken.decided_by == {"priya": {"granted an approval": 1}}
    assert found.evaluation.cost.money == {"INR": 10050.0}


def _guards_refused_what_they_must(found: Findings) -> None:
    safety = found.evaluation.safety
    assert safety.denials == {
        "no-threats-in-reminders": 1, "at-most-3-reminders-per-invoice": 1}
    assert safety.executed_unsafe == 0
    cobalt = next(r for r in found.runs if r.invoice_id == "INV-2043")
    assert [f.error_type for f in cobalt.events(ev.ToolFailed)] == ["CoerciveLanguage"]
    assert (found.coercive_blocked, found.coercive_delivered) == (2, 0)
    assert not any("legal" in m["body"].lower() or "warning" in m["body"].lower()
                   for m in found.messages)
    assert sorted((t["invoice_id"], t["team"]) for t in found.tickets) == [
        ("INV-2042", "disputes"), ("INV-2043", "collections")]


def _models_asked_once_per_turn(found: Findings) -> None:
    for r in found.runs:
        responses = r.events(ev.ModelResponded)
        assert len({e.key for e in responses}) == len(responses) == r.state.model_calls
        assert r.state.tokens_in > 0 and r.state.cost_usd > 0
    assert found.evaluation.cost.model_calls == sum(r.state.model_calls for r in found.runs)
    assert found.iterations == sum(r.state.model_calls for r in found.runs) - len(found.runs)


@pytest.mark.crash
def test_demo_exits_zero_and_ends_by_saying_how_to_open_the_console(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, str(DEMO), "--data", str(data)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    # The journal is encrypted: no customer's name or address is in the database file in
    # plaintext, and without the keyring `runs show` reads [encrypted].
    out = done.stdout
    assert "found in plaintext in the database file and its WAL: 0" in out
    assert re.search(r"without the keyring: [1-9]\d* lines read \[encrypted\]", out)

    # Its evaluation is `underway eval`'s, on the demo's journal.
    evaluation = out[out.index("$ underway eval"):out.index("what the outside systems saw")]
    assert "3 started: 3 completed" in evaluation and "executed-unsafe  0" in evaluation
    assert "0 effect keys happened more than once" in evaluation
    assert "1 step taken over after a crash or a lost lease" in evaluation
    assert "priya: granted an approval 1" in evaluation

    # The demo's journals pass a replay of the same code given only the workers' config
    # file and the data directory: no day length in the environment, no --environment.
    replayed = out[out.index("$ underway replay"):out.index("what the outside systems saw")]
    assert ("replayed 3 runs of flow 'collections' (tenant 'default'): 0 would have "
            "decided differently") in replayed

    # The last section: the command serving the console on the demo's journal (with the
    # keyring that opens it), a key that signs in to the demo's tenant as admin, the URL,
    # and a real run that waited for a signed approval.
    console = out[out.index("[7] the console"):]
    db = f"sqlite:///{data.resolve() / 'underway.db'}"
    keyring = data.resolve() / "keyring.json"
    serve = re.search(r"\$ (\S+) serve --db (\S+) --keyring (\S+)\n", console)
    assert serve is not None and serve.group(2) == db and serve.group(3) == str(keyring)
    assert Path(serve.group(1)).name == "underway"
    assert "http://127.0.0.1:8420/" in console
    token = re.search(r"\b(uwk_\S+)", console)
    run = re.search(r"run (\S+) \((INV-\d+)\): its timeline, with the write-off", console)
    assert token is not None and run is not None
    assert "runs table" in console and "approvals inbox" in console
    store = connect(db)
    encrypt(store, KeyringFile(keyring))
    try:
        key = authenticate(store, token.group(1))
        assert key is not None and (key.tenant_id, key.role) == ("default", "admin")
        history = [r.event for r in uw.Client(store).history(run.group(1))]
        assert any(isinstance(e, ev.ApprovalRequested) for e in history)
        assert any(isinstance(e, ev.ApprovalGranted) for e in history)
    finally:
        store.close()


def test_the_demo_keeps_its_files_where_the_next_demo_replaces_them(tmp_path: Path) -> None:
    default = tmp_path / "demo-data" / "collections_agent"
    first = demo_module.data_dir(None, default)
    (first / "underway.db").write_text("an earlier demo's journal")
    assert demo_module.data_dir(None, default) == first.resolve()
    assert [p.name for p in first.iterdir()] == [demo_module.MARK]
    # A directory the demo did not make is never emptied, given or by default.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for given, fallback in ((mine, default), (None, mine)):
        with pytest.raises(FileExistsError, match="not empty"):
            demo_module.data_dir(given, fallback)
    assert (mine / "notes.txt").read_text() == "keep"


@pytest.mark.crash
def test_the_demo_runs_through_the_openai_adapter_against_a_local_server(
    tmp_path: Path,
) -> None:
    """UNDERWAY_MODEL swaps the brain for OpenAIChat: the same story goes over HTTP in the
    OpenAI wire format, through the real SDK, with every fifth request rate limited."""
    server = BrainServer(day=1.0, rate_limit_every=5).start()
    try:
        done = subprocess.run(
            [sys.executable, str(DEMO), "--data", str(tmp_path / "demo")],
            capture_output=True, text=True, timeout=180, check=False,
            env={**os.environ, "UNDERWAY_MODEL":
                 f"openai-compatible:{BRAIN_MODEL_ID}@{server.base_url}"},
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "OK: every run completed" in done.stdout
    assert server.completions >= 30 and server.rate_limited >= 5
    # `underway eval`'s cost line: "$0.0220 model cost (48 calls, ...".
    found = re.search(r"model cost \(([\d,]+) calls?,", done.stdout)
    assert found is not None, done.stdout[-4000:]
    calls = int(found.group(1).replace(",", ""))
    # Each completion the server answered was journaled once (none asked twice), except
    # those of steps a killed worker had not committed yet.
    assert 0 < calls <= server.completions


def test_the_worker_app_says_which_variable_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(collections_app.DATA_ENV, raising=False)
    with pytest.raises(ConfigurationError, match=collections_app.DATA_ENV):
        collections_app.app()


def test_the_worker_app_needs_the_services_running(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"services\.json"):
        collections_app.flows(tmp_path)
