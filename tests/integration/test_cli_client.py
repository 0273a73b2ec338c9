"""The command line on the client: ``runs start`` by flow name, ``runs ls`` filters and
pages, and RUN arguments given as a unique prefix of a run's id."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.cli.runs import _print_table
from underway.runner import Runner

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class Invoice(BaseModel):
    invoice: str
    amount: int


class Notes(BaseModel):
    pass


reminders: uw.Flow[Notes, Invoice] = uw.Flow("reminders", state=Notes, input=Invoice,
                                             signals=["paid"])


@reminders.step
async def remind(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    return ctx.wait("paid", then=settle)


@reminders.step
async def settle(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    return ctx.done(ctx.signal)


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def engine(url: str) -> Iterator[uw.Engine]:
    """A worker's engine with the flow, on the database the commands use."""
    store = uw.connect(url)
    yield uw.Engine(store, flows=[reminders])
    store.close()


def drive(engine: uw.Engine) -> None:
    asyncio.run(Runner(engine).run_until_idle())


def test_runs_start_starts_a_flow_by_name_once_per_key(url: str, engine: uw.Engine) -> None:
    code, out, err = cli("runs", "start", "reminders", "--input",
                         '{"invoice": "INV-1", "amount": 5}', "--key", "INV-1", "--db", url)
    assert code == 0
    # A name new to the tenant may be a typo: nothing without the flow's code can tell.
    assert err.startswith("note: tenant 'default' has no earlier run of flow 'reminders'")
    run_id = re.fullmatch(r"started run (\S+) of flow 'reminders'\n", out)
    assert run_id is not None
    code, out, err = cli("runs", "start", "reminders", "--input", "{}", "--key", "INV-1",
                         "--json", "--db", url)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"run_id": run_id[1], "created": False}

    drive(engine)
    code, out, _ = cli("runs", "signal", run_id[1], "paid", "--payload", '{"ok": 1}',
                       "--db", url)
    assert code == 0
    drive(engine)
    assert engine.state(run_id[1]).result == {"ok": 1}


def test_runs_start_with_bad_input_fails_the_run_and_says_why(
    url: str, engine: uw.Engine
) -> None:
    code, out, _ = cli("runs", "start", "reminders", "--input", '{"invoice": 7}', "--json",
                       "--db", url)
    assert code == 0
    run_id = json.loads(out)["run_id"]
    drive(engine)
    code, out, _ = cli("runs", "show", run_id, "--db", url)
    assert code == 0
    assert "started by name (input unchecked)" in out
    assert "run FAILED: invalid input for flow 'reminders'" in out

    code, _, err = cli("runs", "start", "reminders", "--input", "{not json", "--db", url)
    assert code == 2 and "invalid JSON for --input" in err


def test_run_arguments_take_a_unique_prefix(url: str, engine: uw.Engine) -> None:
    for run_id in ("5c1e0a77-one", "5c1e0b12-two"):
        engine.start(reminders, {"invoice": run_id, "amount": 1}, run_id=run_id)
    drive(engine)

    code, out, _ = cli("runs", "show", "5c1e0a", "--db", url)
    assert code == 0 and "run      5c1e0a77-one" in out
    code, out, _ = cli("runs", "events", "5c1e0b", "--json", "--db", url)
    assert code == 0 and json.loads(out)[0]["type"] == "RunStarted"
    code, out, _ = cli("runs", "signal", "5c1e0b", "paid", "--db", url)
    assert (code, out) == (0, "signal 'paid' delivered to run 5c1e0b12-two\n")
    code, out, _ = cli("runs", "cancel", "5c1e0a7", "--by", "ops", "--db", url)
    assert code == 0 and out.startswith("cancellation of run 5c1e0a77-one requested by ops")
    code, out, _ = cli("audit", "verify", "5c1e0a", "--db", url)
    assert code == 0 and "verified 1 run" in out

    code, _, err = cli("runs", "show", "5c1e0", "--db", url)
    assert code == 2
    assert err.strip() == (
        "underway: error: run id prefix '5c1e0' matches 2 runs in tenant 'default' "
        "(5c1e0a77-one, 5c1e0b12-two); give more of the id"
    )
    for args in (["runs", "show", "9"], ["runs", "resume", "9", "--by", "ops"],
                 ["approvals", "show", "9"], ["audit", "verify", "9"]):
        code, _, err = cli(*args, "--db", url)
        assert code == 2 and "no run '9' in tenant 'default'" in err, args


def test_runs_ls_filters_by_flow_and_time_and_pages(url: str, engine: uw.Engine) -> None:
    clock = uw.ManualClock(T0)
    client = uw.Client(engine.store, clock=clock)
    for i in range(3):
        client.start("reminders", {"invoice": str(i), "amount": 1}, run_id=f"run-{i}")
        clock.advance(3600)
    client.start("refunds", {}, run_id="refund-0")

    def listed(*args: str) -> tuple[list[str], str]:
        code, out, err = cli("runs", "ls", "--json", *args, "--db", url)
        assert code == 0, err
        return [r["run_id"] for r in json.loads(out)], err

    assert listed()[0] == ["refund-0", "run-2", "run-1", "run-0"]
    assert listed("--flow", "reminders")[0] == ["run-2", "run-1", "run-0"]
    assert listed("--since", "2027-01-15T09:00", "--until", "2027-01-15T10:00:00+00:00")[0] \
        == ["run-1"]
    assert listed("--until", str(T0 + 1))[0] == ["run-0"]

    first, err = listed("--limit", "2")
    assert first == ["refund-0", "run-2"]
    cursor = re.fullmatch(r"next page: --cursor (\S+)\n", err)
    assert cursor is not None
    rest, err = listed("--limit", "2", "--cursor", cursor[1])
    assert (rest, err) == (["run-1", "run-0"], "")

    code, out, err = cli("runs", "ls", "--wide", "--flow", "refunds", "--db", url)
    assert code == 0 and out.splitlines()[1].split()[:3] == ["refund-0", "refunds", "ready"]
    code, out, _ = cli("runs", "ls", "--flow", "nothing", "--db", url)
    assert (code, out) == (0, "no 'nothing' runs in tenant 'default'\n")
    code, _, err = cli("runs", "ls", "--since", "yesterday", "--db", url)
    assert code == 2 and "--since 'yesterday' is not a time" in err
    code, _, err = cli("runs", "ls", "--cursor", "garbage", "--db", url)
    assert code == 2 and "invalid cursor" in err


def test_runs_start_with_the_app_checks_input_now_and_stores_nothing_bad(
    url: str, engine: uw.Engine
) -> None:
    code, _, err = cli("runs", "start", "reminders", "--app", "test_cli_client:reminders",
                       "--input", '{"invoice": 7}', "--db", url)
    assert code == 2 and "invalid input for flow 'reminders'" in err
    code, _, err = cli("runs", "start", "remindres", "--app", "test_cli_client:reminders",
                       "--input", "{}", "--db", url)
    assert code == 2
    assert "flow 'remindres' is not registered with this client; known: ['reminders']" in err
    assert json.loads(cli("runs", "ls", "--json", "--db", url)[1]) == []

    code, out, _ = cli("runs", "start", "reminders", "--app", "test_cli_client:reminders",
                       "--input", '{"invoice": "INV-9", "amount": 2}', "--json", "--db", url)
    assert code == 0
    run_id = json.loads(out)["run_id"]
    code, out, _ = cli("runs", "show", run_id[:8], "--db", url)
    assert code == 0 and "started at step remind" in out


def test_runs_ls_at_a_terminal_shows_id_prefixes_that_run_arguments_take(
    url: str, engine: uw.Engine, capsys: pytest.CaptureFixture[str],
) -> None:
    engine.start(reminders, {"invoice": "I", "amount": 1},
                 run_id="0b5e2f4c-1d2e-4f60-8a9b-0c1d2e3f4a5b")
    rows = uw.Client(engine.store).list_runs().runs
    _print_table(rows, wide=False)
    short = capsys.readouterr().out.splitlines()[1].split()[0]
    assert short == "0b5e2f4c"
    code, out, _ = cli("runs", "show", short, "--db", url)
    assert code == 0 and "0b5e2f4c-1d2e-4f60-8a9b-0c1d2e3f4a5b" in out
    _print_table(rows, wide=True)
    assert capsys.readouterr().out.splitlines()[1].split()[0] == rows[0].run_id
