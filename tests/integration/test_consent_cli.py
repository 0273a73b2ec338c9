"""``underway consent grant|withdraw|show`` and the data subject and purpose of runs started
from the command line (``runs start``, ``events send`` through a route that takes the
subject from the event), on SQLite and PostgreSQL; bad ids exit with status 2 and one
line, storing nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.scheduling.intake import IntakeError, Routes, StartFlow, intake
from underway.store.base import Store

ROUTES = Routes({"customer.visited": StartFlow("visit", subject_from="payload.customer.id",
                                               purpose="service")})
"""What ``--routes test_consent_cli:ROUTES`` names (this folder is on the import path)."""


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = uw.connect(url)
    yield s
    s.close()


def test_grant_withdraw_and_show(url: str, store: Store) -> None:
    code, out, _ = cli("consent", "grant", "cust-42", "marketing", "--by", "crm",
                       "--reference", "CM-1", "--tenant", "acme", "--db", url)
    assert code == 0, out
    assert "cust-42  marketing  granted  (by crm, reference CM-1)" in out
    code, out, _ = cli("consent", "withdraw", "cust-42", "marketing", "--by", "cust-42 via app",
                       "--tenant", "acme", "--db", url)
    assert code == 0 and "withdrawn  (by cust-42 via app)" in out
    cli("consent", "grant", "cust-42", "service", "--by", "crm", "--tenant", "acme",
        "--db", url)
    run_id, _ = uw.Client(store).start("visit", {"x": 1}, tenant_id="acme", subject="cust-42",
                                       purpose="service")

    code, out, _ = cli("consent", "show", "cust-42", "--tenant", "acme", "--db", url)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "subject 'cust-42' in tenant 'acme'"
    assert lines[1].startswith("consent to marketing: withdrawn since ")
    assert lines[2].startswith("consent to service: granted since ")
    assert [line.split("  ")[3:5] for line in lines[4:7]] == [
        ["marketing", "granted"], ["marketing", "withdrawn"], ["service", "granted"]]
    assert lines[7] == "runs: 1" and lines[8].startswith(f"  {run_id}  visit  ready  "
                                                         "purpose service")
    code, out, _ = cli("consent", "show", "cust-42", "--purpose", "service", "--json",
                       "--tenant", "acme", "--db", url)
    shown = json.loads(out)
    assert [(c["purpose"], c["state"]) for c in shown["current"]] == [("service", "granted")]
    assert [c["purpose"] for c in shown["history"]] == ["service"]
    assert [r["run_id"] for r in shown["runs"]] == [run_id]
    code, out, _ = cli("consent", "show", "cust-42", "--db", url)
    assert code == 0 and "consent: none recorded" in out and "runs: 0" in out


@pytest.mark.parametrize(("args", "says"), [
    (["grant", "cust 42", "marketing", "--by", "crm"], "holds whitespace"),
    (["grant", "cust-42", "Marketing", "--by", "crm"], "must be a purpose name"),
    (["withdraw", "cust-42", "marketing", "--by", " "], "say who records"),
    (["grant", "cust-42", "marketing", "--by", "crm", "--reference", " R"],
     "without spaces around it"),
])
def test_bad_input_exits_2_and_stores_nothing(url: str, store: Store, args: list[str],
                                              says: str) -> None:
    code, _, err = cli("consent", *args, "--db", url)
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1
    assert store.consent_history("default", "cust-42") == []


def test_runs_start_names_subject_purpose_and_consent(url: str, store: Store) -> None:
    code, out, err = cli("runs", "start", "visit", "--subject", "cust-9", "--purpose",
                         "marketing", "--consent", "CM-9", "--json", "--db", url)
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    row = store.get_run("default", run_id)
    assert row is not None and (row.subject, row.purpose) == ("cust-9", "marketing")
    code, _, err = cli("runs", "start", "visit", "--subject", "cust 9", "--db", url)
    assert code == 2 and "holds whitespace" in err
    assert [r.run_id for r in store.list_runs("default")] == [run_id]


def test_events_send_takes_the_subject_from_the_event(url: str, store: Store) -> None:
    code, out, err = cli(
        "events", "send", "--entity", "e-1", "--type", "customer.visited", "--source", "crm",
        "--key", "k-1", "--routes", "test_consent_cli:ROUTES", "--consent", "CM-3",
        "--payload", json.dumps({"customer": {"id": 314}}), "--json", "--db", url)
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    row = store.get_run("default", run_id)
    assert row is not None and (row.subject, row.purpose) == ("314", "service")
    state = uw.Client(store).state(run_id)
    assert (state.subject, state.purpose, state.consent) == ("314", "service", "CM-3")
    code, out, err = cli(
        "events", "send", "--entity", "e-2", "--type", "customer.visited", "--source", "crm",
        "--key", "k-2", "--routes", "test_consent_cli:ROUTES", "--purpose", "marketing",
        "--payload", json.dumps({"customer": {"id": "c-2"}}), "--json", "--db", url)
    assert code == 0, err
    row = store.get_run("default", json.loads(out)["run_id"])
    assert row is not None and (row.subject, row.purpose) == ("c-2", "marketing")


def test_an_event_without_the_subject_field_is_refused(store: Store) -> None:
    event = {"tenant_id": "acme", "entity_id": "e-1", "event_type": "customer.visited",
             "occurred_at": 1_800_000_000, "source": "crm", "idempotency_key": "k-1",
             "payload": {"customer": {"name": "no id"}}}
    with pytest.raises(IntakeError, match=re.escape(
            "takes the run's subject from 'payload.customer.id', which holds nothing")):
        intake(uw.Client(store), event, ROUTES)
    with pytest.raises(IntakeError, match="holds whitespace"):
        intake(uw.Client(store), {**event, "payload": {"customer": {"id": "a b"}}}, ROUTES)
    with pytest.raises(IntakeError, match="subject_from must be a dotted path"):
        StartFlow("visit", subject_from="payload..id")
    with pytest.raises(IntakeError, match="must be a purpose name"):
        StartFlow("visit", purpose="Sales")
    assert store.list_runs("acme") == [] and store.get_intake("acme", "k-1") is None
