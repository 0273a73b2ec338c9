"""A run is named on the command line by its id or a prefix of exactly one run's id, the
same way in every command. An audit command never answers "none" for a prefix: the
access log of a run named by a prefix lists its reads, an ambiguous prefix is refused
naming the runs, and a prefix of no run says so."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import Client, Flow, RunContext, connect
from underway.cli import app


class Patient(BaseModel):
    name: str = "Meena"


reminder = Flow("reminder", input=Patient, state=Patient)


@reminder.step(start=True)
async def send(ctx: RunContext[Patient, Patient]):  # type: ignore[no-untyped-def]
    return ctx.done()


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.fixture
def runs(db_url: str) -> list[str]:
    """Runs enough that two share a first character (17 hex digits: one must repeat)."""
    store = connect(db_url)
    try:
        client = Client(store, flows=[reminder])
        return [client.start(reminder, {"name": f"p{i}"})[0] for i in range(17)]
    finally:
        store.close()


def test_access_log_of_a_run_named_by_a_prefix_lists_its_reads(
    db_url: str, runs: list[str],
) -> None:
    run = runs[0]
    prefix = next(run[:n] for n in range(4, 36)
                  if sum(r.startswith(run[:n]) for r in runs) == 1)
    code, out = cli("runs", "show", prefix, "--db", db_url, "--by", "auditor")
    assert code == 0, out
    code, out = cli("access-log", "--run", prefix, "--db", db_url)
    assert code == 0, out
    assert run in out and "runs show" in out and "auditor" in out
    assert "no reads recorded" not in out
    code, whole = cli("access-log", "--run", run, "--db", db_url)
    assert code == 0 and whole == out


def test_a_prefix_of_several_runs_is_refused_naming_them(db_url: str, runs: list[str]) -> None:
    first, _ = Counter(r[0] for r in runs).most_common(1)[0]
    for args in (["access-log", "--run", first], ["audit", "verify", first],
                 ["runs", "show", first], ["hold", "add", "--run", first, "--reason", "x",
                                           "--by", "dpo"]):
        code, out = cli(*args, "--db", db_url)
        assert code == 2, (args, out)
        assert f"run id prefix {first!r} matches" in out and "give more of the id" in out


def test_a_prefix_of_no_run_is_an_error_not_an_empty_log(db_url: str, runs: list[str]) -> None:
    code, out = cli("access-log", "--run", "zz-not-a-run", "--db", db_url)
    assert code == 2
    assert "no run 'zz-not-a-run' in tenant 'default'" in out
    assert "no reads recorded" not in out


def test_a_run_with_no_reads_says_which_run(db_url: str, runs: list[str]) -> None:
    code, out = cli("access-log", "--run", runs[1], "--db", db_url)
    assert code == 0
    assert out.strip() == f"no reads recorded of run {runs[1]} in tenant 'default'"


def test_audit_verify_takes_a_prefix(db_url: str, runs: list[str]) -> None:
    run = runs[2]
    prefix = next(run[:n] for n in range(4, 36)
                  if sum(r.startswith(run[:n]) for r in runs) == 1)
    code, out = cli("audit", "verify", prefix, "--db", db_url)
    assert code == 0, out
    assert "1 run" in out
