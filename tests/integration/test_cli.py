"""The `underway` command line on real databases: every command, and its error paths."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import CallInfo, Engine, Flow, ManualClock, RunContext, Runner, connect, tool
from underway.cli import app
from underway.flow import Next
from underway.ops.overview import short_worker
from underway.store import queries
from underway.store.base import Store

UNDERWAY = Path(sys.executable).with_name("underway")

# -- flows that leave runs in each status ----------------------------------------------


class Ticket(BaseModel):
    subject: str = "refund"


class Notes(BaseModel):
    approved_by: str = ""
    receipt: Any = None


class Interrupted(BaseException):
    """Stands in for the process dying while a tool runs."""


CRASHES: list[str] = []
"""Calls of ``refund`` that die before returning (one entry per crash)."""


@tool(mutating=False)
def lookup(args: Any) -> Any:
    return {"customer": "c-17"}


@tool
def refund(args: Any, info: CallInfo) -> Any:
    if CRASHES:
        CRASHES.pop()
        raise Interrupted
    return {"refunded": args["amount"]}


approval: Flow[Notes, Ticket] = Flow("approval", state=Notes, input=Ticket)


@approval.step(start=True)
async def ask(ctx: RunContext[Notes, Ticket]) -> Next:
    await ctx.call(lookup, {"subject": ctx.input.subject})
    return ctx.wait("approve", then=decide)


@approval.step
async def decide(ctx: RunContext[Notes, Ticket]) -> Next:
    ctx.state.approved_by = str((ctx.signal or {}).get("by"))
    return ctx.done({"approved_by": ctx.state.approved_by})


payout: Flow[Notes, Ticket] = Flow("payout", state=Notes, input=Ticket)


@payout.step(start=True)
async def pay(ctx: RunContext[Notes, Ticket]) -> Next:
    ctx.state.receipt = await ctx.call(refund, {"amount": 30})
    return ctx.done({"receipt": ctx.state.receipt})


BROKEN: list[str] = []
"""Runs of ``fragile`` whose step raises (a bug an operator fixes, then resumes)."""

fragile: Flow[Notes, Ticket] = Flow("fragile", state=Notes, input=Ticket)


@fragile.step(start=True)
async def parse(ctx: RunContext[Notes, Ticket]) -> Next:
    if ctx.run_id in BROKEN:
        raise ValueError("unparseable invoice")
    return ctx.done("parsed")


@fragile.step
async def skip_parsing(ctx: RunContext[Notes, Ticket]) -> Next:
    return ctx.done("skipped")


nap: Flow[Notes, Ticket] = Flow("nap", state=Notes, input=Ticket)


@nap.step(start=True)
async def sleep_long(ctx: RunContext[Notes, Ticket]) -> Next:
    return ctx.sleep(86_400 * 30, then=wake)


@nap.step
async def wake(ctx: RunContext[Notes, Ticket]) -> Next:
    return ctx.done("woke")


class World:
    """An engine on a real store with a manual clock, driven by the test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.store: Store = connect(url)
        # Commands stamp signals with the system clock, so the test's clock starts there.
        self.clock = ManualClock(float(int(time.time())))
        self.engine = Engine(
            self.store, flows=[approval, payout, nap, fragile, delegate], tools=[lookup, refund],
            clock=self.clock,
        )

    def start(self, flow: Flow[Any, Any], run_id: str, tenant: str = "default") -> str:
        self.engine.start(flow, {}, run_id=run_id, tenant_id=tenant)
        return run_id

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def catch_up(self) -> None:
        """Move the test clock past the system time a command stamped a signal with."""
        self.clock.t = max(self.clock.t, time.time() + 1)

    def escalate(self, run_id: str) -> None:
        """Leave ``run_id`` (a payout) with a refund of unknown outcome, as after a crash."""
        CRASHES.append(run_id)
        with pytest.raises(Interrupted):
            self.drive()
        self.clock.advance(self.engine.lease_ttl + 1)
        self.drive()
        assert self.status(run_id) == "escalated"

    def status(self, run_id: str, tenant: str = "default") -> str:
        row = self.store.get_run(tenant, run_id)
        assert row is not None
        return row.status


@pytest.fixture
def world(sqlite_url: str) -> Any:
    w = World(sqlite_url)
    yield w
    w.store.close()


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


# -- db migrate --------------------------------------------------------------------------


def test_db_migrate_creates_the_schema_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/fresh.db"
    code, out, _ = cli("db", "migrate", "--db", url)
    assert code == 0
    store = connect(url, migrate=False)
    version = store.schema_version()
    store.close()
    assert version >= 1
    assert out.strip() == f"schema version {version}"
    assert cli("--db", url, "db", "migrate")[:2] == (0, out)


def test_db_migrate_reads_the_url_from_the_environment(tmp_path: Path) -> None:
    code, out, _ = cli("db", "migrate", env={"UNDERWAY_DB": f"sqlite:///{tmp_path}/env.db"})
    assert code == 0
    assert out.startswith("schema version ")
    assert (tmp_path / "env.db").exists()


# -- runs ls -----------------------------------------------------------------------------


def test_runs_ls_lists_runs_with_status_and_filters(world: World) -> None:
    world.start(approval, "waits-1")
    world.start(nap, "naps-1")
    world.start(nap, "other-tenant", tenant="acme")
    world.drive()
    world.store.close()

    code, out, _ = cli("runs", "ls", "--db", world.url)
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(rows) == {"waits-1", "naps-1"}
    assert rows["waits-1"][1:4] == ["approval", "waiting", "decide"]
    # What each waits on, in words: a signal, a timer and when it fires.
    assert "waiting on signal approve" in out
    assert re.search(r"naps-1 .* waiting on a timer until \d{4}-\d\d-\d\d \d\d:\d\d UTC", out)

    code, out, _ = cli("runs", "ls", "--db", world.url, "--status", "completed")
    assert (code, out.strip()) == (0, "no completed runs in tenant 'default'")

    code, out, _ = cli("--db", world.url, "runs", "ls", "--tenant", "acme", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(r["run_id"], r["flow"], r["status"]) for r in listed] == [
        ("other-tenant", "nap", "waiting")
    ]


# -- runs show and runs events -----------------------------------------------------------


delegate: Flow[Notes, Ticket] = Flow("delegate", state=Notes, input=Ticket)


@delegate.step(start=True)
async def hand_over(ctx: RunContext[Notes, Ticket]) -> Next:
    outcome = await ctx.wait_for(await ctx.start(approval, {"subject": ctx.input.subject}))
    return ctx.done(outcome.result)


def test_runs_show_names_a_runs_parent_and_children(world: World) -> None:
    world.start(delegate, "boss")
    world.drive()
    [child] = world.engine.state("boss").children
    code, out, _ = cli("runs", "show", "boss", "--db", world.url)
    assert code == 0
    assert f"child    {child} (approval): waiting" in out
    assert f"waiting for child run {child}" in out
    code, out, _ = cli("runs", "show", child, "--db", world.url)
    assert "parent   boss" in out and "as a child of run boss" in out

    world.engine.signal(child, "approve", {"by": "dana"})
    world.drive()
    code, out, _ = cli("runs", "show", "boss", "--db", world.url)
    assert f"child    {child} (approval): completed" in out
    assert f'child run {child} COMPLETED: {{"approved_by":"dana"}}' in out



def test_runs_show_prints_status_counts_and_a_timeline(world: World) -> None:
    world.start(approval, "show-1")
    world.drive()
    world.engine.signal("show-1", "approve", {"by": "dana"}, sender="dana")
    world.drive()
    world.store.close()

    code, out, _ = cli("runs", "show", "show-1", "--events", "--db", world.url)
    assert code == 0
    assert "run      show-1" in out
    assert 'status   completed - result {"approved_by":"dana"}' in out
    assert "counts   9 events, 2 steps, 1 tool call (0 failed)" in out
    lines = out.splitlines()
    timeline = lines[lines.index(next(x for x in lines if x.startswith("seq"))) + 1:]
    assert [line.split()[0] for line in timeline] == [str(n) for n in range(1, 10)]
    text = "\n".join(timeline)
    assert "lookup #0 key=show-1:0:ask:0 ok" in text
    assert "step ask -> decide" in text
    assert "waiting for signal 'approve'" in text
    assert "signal 'approve' from dana" in text
    assert "run completed" in text


def test_runs_show_groups_each_step_attempt_with_its_worker_and_durations(
    world: World,
) -> None:
    world.start(approval, "rows-1")
    world.drive()
    world.clock.advance(90)
    world.engine.signal("rows-1", "approve", {"by": "dana"}, sender="dana")
    world.clock.advance(5)
    world.drive()
    world.store.close()

    code, out, _ = cli("runs", "show", "rows-1", "--db", world.url)
    assert code == 0, out
    worker = short_worker(world.engine.owner)
    assert f"workers  {worker} (2 attempts)" in out
    rows = out.splitlines()
    top = rows.index(next(x for x in rows if x.lstrip().startswith("seqs")))
    heads = [x.split()[0] for x in rows[top + 2:] if not x.startswith(" ")]
    # A row per step attempt, each with the seqs of its events: nothing left out.
    assert heads == ["1-1", "2-6", "7-9"]
    (ask,) = [x for x in rows if x.startswith("2-6")]
    assert f"step ask -> decide, 1 call, worker {worker}" in ask
    (decide,) = [x for x in rows if x.startswith("7-9")]
    assert f"step decide -> end, worker {worker}" in decide
    text = "\n".join(rows)
    # The wait says what it waited on, for how long (the clock moved 95s) and what ended it.
    assert "waiting for signal 'approve': 95s, then signal 'approve' from dana" in text
    assert "lookup #0 key=rows-1:0:ask:0 ok" in text and "run completed" in text
    # Bookkeeping is folded into the rows; --events prints it.
    assert "StepStarted" not in text and "step ask, attempt 1" not in text
    code, raw, _ = cli("runs", "show", "rows-1", "--events", "--db", world.url)
    assert "StepStarted" in raw and "step ask, attempt 1" in raw


def test_runs_events_prints_every_decoded_event_with_its_hash(world: World) -> None:
    world.start(nap, "ev-1")
    world.drive()
    world.store.close()

    code, out, _ = cli("runs", "events", "ev-1", "--db", world.url)
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events] == [
        "RunStarted", "StepStarted", "StepCompleted", "TimerSet"
    ]
    started = world.clock.now()
    assert all(len(e["hash"]) == 64 and e["at"] == started for e in events)
    assert events[0]["data"]["flow"] == "nap"
    assert events[3]["data"]["wake_at"] == started + 86_400 * 30

    code, out, _ = cli("runs", "events", "ev-1", "--json", "--db", world.url)
    assert code == 0
    assert json.loads(out) == events


# -- steering: signal, cancel, resolve ---------------------------------------------------


def test_runs_signal_wakes_a_waiting_run(world: World) -> None:
    world.start(approval, "sig-1")
    world.drive()
    code, out, _ = cli("runs", "signal", "sig-1", "approve", "--payload", '{"by": "erin"}',
                       "--id", "approval-77", "--db", world.url)
    assert (code, out.strip()) == (0, "signal 'approve' delivered to run sig-1")
    code, out, _ = cli("runs", "signal", "sig-1", "approve", "--payload", '{"by": "mallory"}',
                       "--id", "approval-77", "--db", world.url)
    assert code == 0
    assert "already delivered" in out

    world.catch_up()
    world.drive()
    state = world.engine.state("sig-1")
    assert state.status == "completed"
    assert state.result == {"approved_by": "erin"}


def test_runs_cancel_stops_a_sleeping_run(world: World) -> None:
    world.start(nap, "nap-1")
    world.drive()
    code, out, _ = cli("runs", "cancel", "nap-1", "--by", "ops@example.com",
                       "--reason", "customer left", "--db", world.url)
    assert code == 0
    assert "cancellation of run nap-1 requested by ops@example.com" in out

    world.catch_up()
    world.drive()
    assert world.status("nap-1") == "cancelled"
    code, out, _ = cli("runs", "show", "nap-1", "--db", world.url)
    assert "run cancelled by ops@example.com: customer left" in out
    code, _, err = cli("runs", "cancel", "nap-1", "--by", "ops", "--db", world.url)
    assert code == 2
    assert "already cancelled" in err


def test_runs_resolve_settles_an_escalation(world: World) -> None:
    world.start(payout, "pay-1")
    world.escalate("pay-1")
    code, out, _ = cli("runs", "show", "pay-1", "--db", world.url)
    assert "status   escalated" in out
    assert "ESCALATED to a person [refund #0 key=pay-1:0:pay:0]" in out

    code, out, _ = cli("runs", "resolve", "pay-1", "--resolution", "succeeded", "--by", "fin-ops",
                       "--result", '{"refunded": 30, "ref": "manual"}', "--db", world.url)
    assert (code, out.strip()) == (0, "escalation of run pay-1 resolved as succeeded by fin-ops "
                                      "(unsigned: a worker with --signed-resolutions refuses it)")

    world.catch_up()
    world.drive()
    state = world.engine.state("pay-1")
    assert state.status == "completed"
    assert state.result == {"receipt": {"refunded": 30, "ref": "manual"}}
    code, out, _ = cli("runs", "show", "pay-1", "--db", world.url)
    assert "resolved as succeeded by fin-ops for key pay-1:0:pay:0" in out


def test_runs_resume_restarts_a_dead_run_listed_by_status(world: World) -> None:
    BROKEN.extend(["bad-1", "bad-2"])
    world.start(fragile, "bad-1")
    world.start(fragile, "bad-2")
    world.drive()
    code, out, _ = cli("runs", "ls", "--status", "dead", "--json", "--db", world.url)
    assert code == 0
    assert sorted(r["run_id"] for r in json.loads(out)) == ["bad-1", "bad-2"]

    BROKEN.remove("bad-1")  # the bug is fixed
    code, out, _ = cli("runs", "resume", "bad-1", "--by", "ops", "--db", world.url)
    assert code == 0 and out.startswith("run bad-1 resumed where it stopped by ops (unsigned")
    code, out, _ = cli("runs", "resume", "bad-2", "--by", "ops", "--step", "skip_parsing",
                       "--db", world.url)
    assert code == 0 and out.startswith("run bad-2 resumed at step skip_parsing by ops (unsig")
    world.catch_up()
    world.drive()
    assert world.engine.state("bad-1").result == "parsed"
    assert world.engine.state("bad-2").result == "skipped"
    code, _, err = cli("runs", "resume", "bad-1", "--by", "ops", "--db", world.url)
    assert code == 2 and "not dead" in err


# -- audit verify ------------------------------------------------------------------------


def test_audit_verify_counts_what_it_checked(world: World) -> None:
    world.start(approval, "a-1")
    world.start(nap, "a-2")
    world.start(nap, "a-3", tenant="acme")
    world.drive()
    code, out, _ = cli("audit", "verify", "--db", world.url)
    assert (code, out.strip()) == (
        0, "verified 2 runs, 9 events in 1 tenant: every hash chain is intact"
    )
    code, out, _ = cli("audit", "verify", "--all", "--db", world.url)
    assert (code, out.strip()) == (
        0, "verified 3 runs, 13 events in 2 tenants: every hash chain is intact"
    )
    code, out, _ = cli("audit", "verify", "a-3", "--tenant", "acme", "--db", world.url)
    assert (code, out.strip()) == (
        0, "verified 1 run, 4 events in 1 tenant: every hash chain is intact"
    )


# -- errors: one line; exit status 2 for a usage error, 1 for a runtime failure ----------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["runs", "ls", "--db", "mysql://db/x"], "unsupported database URL 'mysql://db/x'"),
        (["runs", "ls", "--db", "sqlite:///{tmp}/missing.db"], "no SQLite database at"),
        (["runs", "ls"], "no database given: pass --db URL or set UNDERWAY_DB"),
        (["db", "migrate", "--db", "sqlite:///{tmp}/no/such/dir/x.db"],
         "its directory does not exist"),
        (["runs", "ls", "--status", "sleeping", "--db", "{url}"], "unknown status 'sleeping'"),
        (["runs", "show", "nope", "--db", "{url}"], "no run 'nope' in tenant 'default'"),
        (["runs", "events", "nope", "--db", "{url}"], "no run 'nope' in tenant 'default'"),
        (["runs", "show", "live-1", "--tenant", "acme", "--db", "{url}"],
         "no run 'live-1' in tenant 'acme'"),
        (["runs", "signal", "nope", "go", "--db", "{url}"], "no run 'nope'"),
        (["runs", "cancel", "nope", "--by", "x", "--db", "{url}"], "no run 'nope'"),
        (["runs", "resolve", "nope", "--resolution", "retry", "--by", "x", "--db", "{url}"],
         "no run 'nope'"),
        (["audit", "verify", "nope", "--db", "{url}"], "no run 'nope' in tenant 'default'"),
        (["audit", "verify", "live-1", "--all", "--db", "{url}"], "a run id or --all, not both"),
        (["runs", "signal", "live-1", "approve", "--payload", "{{oops", "--db", "{url}"],
         "invalid JSON for --payload"),
        (["runs", "signal", "live-1", "underway.cancel", "--db", "{url}"], "are reserved"),
        (["runs", "resolve", "live-1", "--resolution", "succeeded", "--by", "x",
          "--result", "[1,", "--db", "{url}"], "invalid JSON for --result"),
        (["runs", "resolve", "live-1", "--resolution", "maybe", "--by", "x", "--db", "{url}"],
         "--resolution must be succeeded, failed or retry"),
        (["runs", "resolve", "live-1", "--resolution", "retry", "--by", "x", "--db", "{url}"],
         "run live-1 is waiting, not escalated"),
    ],
)
def test_errors_print_one_line_and_exit_2(
    world: World, tmp_path: Path, args: list[str], message: str
) -> None:
    world.start(approval, "live-1")
    world.drive()
    args = [a.format(url=world.url, tmp=tmp_path) for a in args]
    code, out, err = cli(*args, env={"UNDERWAY_DB": ""})
    assert code == 2, out + err
    assert err.startswith("underway: error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [
    ["runs", "ls"], ["runs", "show", "r-1"], ["queues", "ls"], ["approvals", "ls"],
])
def test_an_unreachable_database_is_a_runtime_failure_exit_1(args: list[str]) -> None:
    code, out, err = cli(*args, "--db", "postgresql://postgres@127.0.0.1:1/x")
    assert code == 1, out + err
    assert err.startswith("underway: error: cannot connect to PostgreSQL")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [
    ["audit", "verify", "--all"], ["access-log", "--verify"], ["access-log"],
])
def test_a_check_that_cannot_be_made_exits_2_never_1_which_is_a_finding(
    args: list[str],
) -> None:
    code, out, err = cli(*args, "--db", "postgresql://postgres@127.0.0.1:1/x")
    assert code == 2, out + err
    assert err.startswith("underway: error: cannot connect to PostgreSQL")


def test_an_empty_sqlite_file_is_reported_as_missing_its_schema(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    code, _, err = cli("runs", "ls", "--db", f"sqlite:///{tmp_path}/empty.db")
    assert code == 1
    assert "has no underway schema; run `underway db migrate` first" in err


def test_a_database_migrated_by_an_older_version_is_reported_and_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    older = queries.migrations("sqlite")[:-1]
    named = queries.load("sqlite")
    with sqlite3.connect(path) as conn:
        # As the store's own connection has it: migration 0017 calls unhex(), which SQLite
        # builds only from 3.41.
        conn.create_function("unhex", 1, lambda t: None if t is None else bytes.fromhex(t))
        conn.execute(named["schema_version_table"])
        for version, name, text in older:
            conn.executescript(text)
            conn.execute(named["record_migration"], (version, name, 0.0))
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT * FROM sqlite_master ORDER BY name").fetchall()
    url = f"sqlite:///{path}"
    for args in (("runs", "ls"), ("apikeys", "ls", "--tenant", "acme")):
        code, _, err = cli(*args, "--db", url)
        assert code == 1, err
        assert (f"schema is at version {len(older)} and this underway needs "
                f"{len(older) + 1}: run `underway db migrate`") in err
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT * FROM sqlite_master ORDER BY name").fetchall() == before
    code, _, err = cli("db", "migrate", "--db", url)
    assert code == 0, err
    code, _, err = cli("runs", "ls", "--db", url)
    assert code == 0, err


# -- the installed script ----------------------------------------------------------------


def test_the_installed_script_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "UNDERWAY_DB": f"sqlite:///{tmp_path}/nothing.db"}
    done = subprocess.run([str(UNDERWAY), "runs", "show", "r-1"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == (
        f"underway: error: no SQLite database at '{tmp_path}/nothing.db'; "
        "create one with `underway db migrate`"
    )


def test_importing_underway_does_not_load_the_cli_libraries() -> None:
    probe = "import sys, underway; print(sorted({'typer', 'rich'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


# -- PostgreSQL --------------------------------------------------------------------------


@pytest.mark.postgres
def test_runs_ls_and_audit_verify_on_postgres(pg_url: str) -> None:
    code, out, _ = cli("db", "migrate", "--db", pg_url)
    assert code == 0
    assert out.startswith("schema version ")
    world = World(pg_url)
    try:
        world.start(approval, "pg-1")
        world.start(nap, "pg-2", tenant="acme")
        world.drive()
    finally:
        world.store.close()

    code, out, _ = cli("runs", "ls", "--db", pg_url)
    assert code == 0
    assert out.splitlines()[1].split()[:4] == ["pg-1", "approval", "waiting", "decide"]
    code, out, _ = cli("runs", "ls", "--json", "--tenant", "acme", "--db", pg_url)
    assert [r["run_id"] for r in json.loads(out)] == ["pg-2"]

    code, out, _ = cli("audit", "verify", "--all", "--db", pg_url)
    assert (code, out.strip()) == (
        0, "verified 2 runs, 9 events in 2 tenants: every hash chain is intact"
    )
    code, _, err = cli("audit", "verify", "nope", "--db", pg_url)
    assert code == 2
    assert "no run 'nope'" in err
