"""``underway retention sweep|log`` and ``underway hold add|rm|ls`` on real databases, and
every command that reads a run after its purge: ``runs show``, ``runs events``, ``runs ls``
and ``audit verify`` show the skeleton and ``[purged]``, never a canary, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from fakes.retention_world import CANARIES, make_runs
from underway.cli import app
from underway.store import Store, connect

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
RULES = '[retention]\ncompleted = "90d"\n'


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                       else "pg_url"))


@pytest.fixture
def runs(url: str) -> dict[str, str]:
    store = connect(url)
    try:
        return make_runs(store)
    finally:
        store.close()


def config(folder: Path, url: str, text: str = RULES) -> str:
    path = folder / "underway.toml"
    path.write_text(f'database = "{url}"\n{text}', encoding="utf-8")
    return str(path)


def no_canary(text: str) -> None:
    assert [c for c in CANARIES if c in text] == []


def test_a_sweep_purges_and_every_reader_shows_the_skeleton(
    url: str, runs: dict[str, str], tmp_path: Path,
) -> None:
    rules = config(tmp_path, url)
    dry = cli("retention", "sweep", "--dry-run", "--config", rules)
    assert dry.exit_code == 0, dry.output
    assert "tenant 'default': would purge 2 runs, 0 held, 0 skipped" in dry.output
    assert runs["letter"] in dry.output and "retention.completed = 90d" in dry.output
    shown = cli("runs", "show", runs["letter"], "--db", url)
    assert CANARIES[0] in shown.output  # nothing changed yet

    done = cli("retention", "sweep", "--config", rules, "--by", "ops@acme")
    assert done.exit_code == 0, done.output
    assert "tenant 'default': purged 2 runs, 0 held, 0 skipped" in done.output
    assert "written to the sweep log" in done.output

    shown = cli("runs", "show", runs["letter"], "--db", url)
    assert shown.exit_code == 0, shown.output
    assert "status   completed - payloads [purged] by retention" in shown.output
    assert "[purged] (retention)" in shown.output
    no_canary(shown.output)
    every = cli("runs", "show", runs["letter"], "--events", "--db", url)
    assert "ToolSucceeded" in every.output and "[purged] (retention)" in every.output
    no_canary(every.output)
    events = cli("runs", "events", runs["letter"], "--json", "--db", url)
    assert events.exit_code == 0, events.output
    items = json.loads(events.output)
    assert items[0]["type"] == "RunStarted" and items[0]["data"]["flow"] == "letter"
    assert {i["payload"] for i in items} == {"[purged]"}
    no_canary(events.output)
    listed = cli("runs", "ls", "--status", "completed", "--wide", "--db", url)
    assert runs["letter"] in listed.output
    audit = cli("audit", "verify", "--db", url)
    assert audit.exit_code == 0, audit.output
    assert "every hash chain is intact" in audit.output
    # The failed and the waiting run keep everything.
    assert CANARIES[0] in cli("runs", "show", runs["doomed"], "--db", url).output

    log = cli("retention", "log", "--db", url)
    assert "by ops@acme: 2 purged, 0 held, 0 skipped" in log.output
    purged = cli("retention", "log", "--runs", "--tenant", "default", "--db", url)
    assert runs["letter"] in purged.output and "retention.completed = 90d" in purged.output
    again = cli("retention", "sweep", "--config", rules)
    assert "purged 0 runs" in again.output


def test_legal_holds_from_the_command_line(
    url: str, runs: dict[str, str], tmp_path: Path,
) -> None:
    held = cli("hold", "add", "--run", runs["letter"][:8], "--reason", "case 7", "--by",
               "counsel", "--db", url)
    assert held.exit_code == 0, held.output
    assert f"legal hold placed on run {runs['letter']}" in held.output
    again = cli("hold", "add", "--run", runs["letter"], "--reason", "x", "--by", "y",
                "--db", url)
    assert again.exit_code == 0 and "already held" in again.output
    subject = cli("hold", "add", "--subject", "ann", "--reason", "request 9", "--by",
                  "counsel", "--db", url)
    assert subject.exit_code == 0, subject.output
    listed = cli("hold", "ls", "--db", url)
    assert f"run {runs['letter']}" in listed.output and "subject ann" in listed.output

    swept = cli("retention", "sweep", "--config", config(tmp_path, url))
    assert "purged 0 runs, 2 held" in swept.output
    assert "legal hold on subject ann: request 9" in swept.output

    lifted = cli("hold", "rm", "--subject", "ann", "--by", "counsel", "--db", url)
    assert lifted.exit_code == 0 and "lifted by counsel" in lifted.output
    swept = cli("retention", "sweep", "--config", config(tmp_path, url))
    assert "purged 1 run, 1 held" in swept.output
    history = cli("hold", "ls", "--released", "--json", "--db", url)
    records = json.loads(history.output)
    assert [(h["kind"], h["released_by"]) for h in records] == [
        ("run", None), ("subject", "counsel")]


@pytest.mark.parametrize(("args", "problem"), [
    (["hold", "add", "--reason", "r", "--by", "b"], "--run RUN or --subject"),
    (["hold", "add", "--run", "x", "--subject", "s", "--reason", "r", "--by", "b"],
     "one of them"),
    (["hold", "add", "--run", "nope", "--reason", "r", "--by", "b"], "no run 'nope'"),
    (["hold", "add", "--subject", "s", "--reason", " ", "--by", "b"], "must not be empty"),
    (["hold", "rm", "--subject", "nobody", "--by", "b"], "no standing hold"),
    (["retention", "log", "--runs"], "give --tenant"),
])
def test_bad_requests_are_refused_naming_the_problem(
    sqlite_url: str, args: list[str], problem: str,
) -> None:
    assert cli("db", "migrate", "--db", sqlite_url).exit_code == 0
    out = cli(*args, "--db", sqlite_url)
    assert out.exit_code == 2 and problem in out.output, out.output


def test_without_rules_nothing_is_purged(sqlite_url: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store: Store = connect(sqlite_url)
    runs = make_runs(store)
    store.close()
    monkeypatch.chdir(tmp_path)
    out = cli("retention", "sweep", "--db", sqlite_url)
    assert out.exit_code == 0 and "no rule means no purge" in out.output
    assert CANARIES[0] in cli("runs", "show", runs["letter"], "--db", sqlite_url).output
    bad = cli("retention", "sweep", "--config", config(tmp_path, sqlite_url,
                                                     '[retention]\ncompleted = 90\n'))
    assert bad.exit_code == 2 and "retention.completed" in bad.output
