"""The runs row never silently disagrees with the journal. An insider forges the row of a
sleeping run (a finished status, a ghost lease, a wake time that is no time, no wake time):
`audit verify` reports it, and a worker heals the row from the journal once, with one
warning, and the run then wakes and finishes. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from insider import insider
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.clock import ManualClock
from underway.engine import Engine
from underway.privacy.erasure import erase_subject
from underway.runner import Runner
from underway.store import connect


class S(BaseModel):
    n: int = 0


def _sleeper() -> uw.Flow[Any, Any]:
    flow = uw.Flow("row-sleeper", state=S)

    @flow.step
    async def first(ctx: Any) -> Any:
        return ctx.sleep(60, then="end")

    @flow.step
    async def end(ctx: Any) -> Any:
        return ctx.done("woke")

    return flow


def _audit(url: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["audit", "verify", "--db", url, "--all"])
    return result.exit_code, result.stdout + result.stderr


def _pg_only_nan(sql: Any) -> str:
    return "'NaN'" if sql.schema is not None else "'tomorrow'"


FORGERIES = {
    "completed": ("UPDATE runs SET status = 'completed', next_wake_at = NULL "
                  "WHERE run_id = ?", "status 'completed'"),
    "ghost-lease": ("UPDATE runs SET lease_owner = 'ghost', lease_expires_at = 1e12 "
                    "WHERE run_id = ?", "no live worker can hold it"),
    "no-expiry-lease": ("UPDATE runs SET lease_owner = 'ghost', lease_expires_at = NULL "
                        "WHERE run_id = ?", "never expires"),
    "no-wake": ("UPDATE runs SET next_wake_at = NULL WHERE run_id = ?",
                "next_wake_at None"),
    "bad-wake": ("UPDATE runs SET next_wake_at = {bad} WHERE run_id = ?", "next_wake_at"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_row_is_reported_then_healed_once_and_the_run_finishes(
    db_url: str, forgery: str, caplog: pytest.LogCaptureFixture
) -> None:
    flow = _sleeper()
    store = connect(db_url)
    clock = ManualClock()
    engine = Engine(store, flows=[flow], clock=clock)
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "waiting"
    code, out = _audit(db_url)
    assert code == 0 and "TAMPERED" not in out, out

    statement, said = FORGERIES[forgery]
    with insider(db_url) as sql:
        sql.q(statement.format(bad=_pg_only_nan(sql)), run_id)
    code, out = _audit(db_url)
    assert code == 1, out
    line = next((x for x in out.splitlines() if x.startswith(f"TAMPERED run {run_id}")), "")
    assert "the runs row disagrees with the journal" in line and said in line, out

    with caplog.at_level(logging.WARNING, logger="underway"):
        for _ in range(3):  # healed once, however often the worker looks
            asyncio.run(Runner(engine).run_until_idle())
    warnings = [r for r in caplog.records if "disagreed with the journal" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == warnings
    code, out = _audit(db_url)
    assert code == 0, out
    row = store.get_run("default", run_id)
    assert row is not None and row.status == "waiting" and row.lease_owner is None
    assert row.next_wake_at == engine.state(run_id).wake_at

    clock.advance(61)
    asyncio.run(Runner(engine).run_until_idle())
    s = engine.state(run_id)
    assert (s.status, s.result) == ("completed", "woke")


def test_a_finished_journal_behind_a_ready_row_is_healed_not_claimed_in_a_loop(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    flow = uw.Flow("row-finished", state=S)

    @flow.step
    async def only(ctx: Any) -> Any:
        return ctx.done("ok")

    store = connect(db_url)
    engine = Engine(store, flows=[flow], clock=ManualClock())
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    with insider(db_url) as sql:
        sql.q("UPDATE runs SET status = 'ready', next_wake_at = 0 WHERE run_id = ?", run_id)
    code, out = _audit(db_url)
    assert code == 1 and "status 'ready'" in out, out
    with caplog.at_level(logging.WARNING, logger="underway"):
        for _ in range(3):
            asyncio.run(Runner(engine).run_until_idle())
    assert sum("disagreed with the journal" in r.getMessage() for r in caplog.records) == 1
    row = store.get_run("default", run_id)
    assert row is not None and (row.status, row.next_wake_at) == ("completed", None)
    assert _audit(db_url)[0] == 0


def test_a_bad_wake_time_does_not_make_the_worker_warn_in_a_loop(db_url: str) -> None:
    flow = _sleeper()
    store = connect(db_url)
    engine = Engine(store, flows=[flow], clock=ManualClock())
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())
    with insider(db_url) as sql:
        sql.q(f"UPDATE runs SET next_wake_at = {_pg_only_nan(sql)} WHERE run_id = ?", run_id)
    # What an idle worker asks between claims reads past the value instead of failing.
    assert store.next_due_at(now=engine.clock.now()) is None
    assert store.next_wake_at() is None
    assert ("default", run_id) in store.suspect_runs(now=engine.clock.now())


def test_a_lease_longer_than_any_worker_takes_is_refused() -> None:
    with pytest.raises(uw.ConfigurationError, match="lease_ttl"):
        Engine(connect("memory:"), lease_ttl=7200)


ROW_IDENTITY = {
    "subject-cleared": ("UPDATE runs SET subject = NULL WHERE run_id = ?",
                        "subject None; the journal says 'cust-9'"),
    "subject-swapped": ("UPDATE runs SET subject = 'cust-1' WHERE run_id = ?",
                        "subject 'cust-1'; the journal says 'cust-9'"),
    "purpose-swapped": ("UPDATE runs SET purpose = 'marketing' WHERE run_id = ?",
                        "purpose 'marketing'; the journal says 'billing'"),
}


@pytest.mark.parametrize("forgery", sorted(ROW_IDENTITY))
def test_a_row_hiding_its_subject_or_purpose_is_reported(db_url: str, forgery: str) -> None:
    """Erasures, legal holds and consent find a run by its row's subject and purpose: a
    row that names another (or none) hides the run from them, and the audit says so."""
    flow = _sleeper()
    store = connect(db_url)
    engine = Engine(store, flows=[flow], clock=ManualClock())
    run_id, _ = engine.start(flow, subject="cust-9", purpose="billing")
    asyncio.run(Runner(engine).run_until_idle())
    assert _audit(db_url)[0] == 0
    statement, said = ROW_IDENTITY[forgery]
    with insider(db_url) as sql:
        sql.q(statement, run_id)
    code, out = _audit(db_url)
    assert code == 1, out
    line = next((x for x in out.splitlines() if x.startswith(f"TAMPERED run {run_id}")), "")
    assert "the runs row disagrees with the journal" in line and said in line, out
    # A worker's claims neither loop on it nor stop the run.
    for _ in range(3):
        asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "waiting"


def test_an_erased_runs_row_keeps_its_subject_and_verifies(db_url: str) -> None:
    """An erasure purges the subject from the run's start; the row keeps it (for the
    erasure log and holds), and that is no disagreement."""
    flow = uw.Flow("row-erased", state=S)

    @flow.step
    async def only(ctx: Any) -> Any:
        return ctx.done("ok")

    store = connect(db_url)
    engine = Engine(store, flows=[flow], clock=ManualClock())
    run_id, _ = engine.start(flow, subject="cust-9", purpose="billing")
    asyncio.run(Runner(engine).run_until_idle())
    erase_subject(store, "cust-9", by="dpo", reason="request")
    assert engine.state(run_id).purged
    code, out = _audit(db_url)
    assert code == 0, out
