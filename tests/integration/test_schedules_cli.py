"""`underway schedules` and `underway events send` on a real SQLite database."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import Engine, Flow, ManualClock, RunContext, connect
from underway.cli import app
from underway.flow import Next
from underway.scheduling.schedules import fire_due_schedules, tick_key

UNDERWAY = Path(sys.executable).with_name("underway")


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/cli.db"
    assert cli("db", "migrate", "--db", url)[0] == 0
    return url


class Digest(BaseModel):
    team: str


class Sent(BaseModel):
    pass


digest: Flow[Sent, Digest] = Flow("digest", state=Sent, input=Digest)


@digest.step(start=True)
async def mail(ctx: RunContext[Sent, Digest]) -> Next:
    return ctx.done({"team": ctx.input.team})


# -- schedules ----------------------------------------------------------------------------


def test_schedules_add_ls_rm(db: str) -> None:
    code, out, _ = cli("schedules", "add", "weekday-digest", "--flow", "digest",
                       "--cron", "0 9 * * MON-FRI", "--tz", "Europe/Berlin",
                       "--input", '{"team": "ops"}', "--queue", "mail", "--db", db)
    assert code == 0
    assert out.startswith("schedule 'weekday-digest' starts flow 'digest' at '0 9 * * MON-FRI' "
                          "(Europe/Berlin); next tick ")
    assert cli("schedules", "add", "paused", "--flow", "digest", "--cron", "@daily",
               "--disabled", "--db", db)[1] == "schedule 'paused' stored, disabled\n"

    code, out, _ = cli("schedules", "ls", "--db", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "FLOW", "CRON", "ZONE", "NEXT", "(UTC)", "LAST", "(UTC)",
                                "QUEUE", "STATE"]
    assert lines[1].split()[:2] == ["paused", "digest"] and lines[1].split()[-1] == "disabled"
    assert "0 9 * * MON-FRI" in lines[2] and lines[2].split()[-2:] == ["mail", "enabled"]

    code, out, _ = cli("schedules", "ls", "--json", "--db", db)
    listed = {s["name"]: s for s in json.loads(out)}
    assert listed["weekday-digest"]["input"] == {"team": "ops"}
    assert listed["weekday-digest"]["timezone"] == "Europe/Berlin"
    assert listed["paused"]["enabled"] is False

    assert cli("schedules", "rm", "paused", "--db", db)[:2] == (0, "schedule 'paused' removed\n")
    code, _, err = cli("schedules", "rm", "paused", "--db", db)
    assert code == 2
    assert err.strip() == ("underway: error: no schedule 'paused' in tenant 'default' "
                           "(use --tenant for another tenant)")
    assert [s["name"] for s in json.loads(cli("schedules", "ls", "--json", "--db", db)[1])] == [
        "weekday-digest"]
    assert cli("schedules", "ls", "--tenant", "acme", "--db", db)[1] == (
        "no schedules in tenant 'acme'\n")


def test_a_schedule_added_on_the_command_line_starts_runs_in_a_worker(db: str) -> None:
    assert cli("schedules", "add", "minutely", "--flow", "digest", "--cron", "* * * * *",
               "--input", '{"team": "sre"}', "--db", db)[0] == 0
    store = connect(db)
    try:
        [sched] = json.loads(cli("schedules", "ls", "--json", "--db", db)[1])
        tick = sched["next_fire_at"]
        engine = Engine(store, flows=[digest], clock=ManualClock(tick))
        assert asyncio.run(fire_due_schedules(engine)) == 1
        [run] = store.list_runs("default")
        assert run.idempotency_key == tick_key("minutely", tick)
        assert engine.state(run.run_id).input == {"team": "sre"}
    finally:
        store.close()
    [after] = json.loads(cli("schedules", "ls", "--json", "--db", db)[1])
    assert (after["last_fired_at"], after["next_fire_at"]) == (tick, tick + 60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "0 25 * * *"], "cron expression '0 25 * * *': hour field '25': 25 is out "
                                   "of range 0-23"),
        (["--cron", "@daily", "--tz", "Moon/Base"], "unknown time zone 'Moon/Base'"),
        (["--cron", "@daily", "--input", "{team"], "invalid JSON for --input"),
        (["--cron", "* * *"], "has 3 field(s); expected five"),
    ],
)
def test_schedules_add_refuses_bad_input_with_the_reason(
    db: str, args: list[str], message: str
) -> None:
    code, _, err = cli("schedules", "add", "bad", "--flow", "digest", *args, "--db", db)
    assert code == 2
    assert err.startswith("underway: error: ") and message in err
    assert json.loads(cli("schedules", "ls", "--json", "--db", db)[1]) == []


# -- events send --------------------------------------------------------------------------

ROUTES_MODULE = """
from pydantic import BaseModel
import underway as uw
from underway.scheduling.intake import Routes, Signal, StartFlow


class Order(BaseModel):
    sku: str


class Seen(BaseModel):
    notes: list = []


order = uw.Flow("order", state=Seen, input=Order)


@order.step(start=True)
async def wait(ctx):
    return ctx.wait("changed", then=wait)


routes = Routes({
    "order.placed": StartFlow(order, signal="changed"),
    "order.changed": Signal("changed"),
})
"""


@pytest.fixture
def routes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A routing module in the current directory, as a project would have it."""
    name = f"routes_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(ROUTES_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return f"{name}:routes"


def send(db: str, routes: str, key: str, *extra: str, type: str = "order.placed") -> Any:
    return cli("events", "send", "--tenant", "shop", "--entity", "order-7", "--type", type,
               "--source", "storefront", "--key", key, "--routes", routes, "--db", db, *extra)


def test_events_send_starts_signals_and_deduplicates(db: str, routes: str) -> None:
    code, out, _ = send(db, routes, "evt-1", "--payload", '{"sku": "A-1"}',
                        "--permission", "orders:write", "--permission", "orders:read")
    assert code == 0
    assert out.startswith("started run ")
    run_id = out.split()[-1]

    assert send(db, routes, "evt-1", "--payload", '{"sku": "A-1"}')[1] == (
        f"duplicate: key 'evt-1' already started run {run_id}\n")
    code, out, _ = send(db, routes, "evt-2", "--payload", '{"qty": 2}', "--json",
                        type="order.changed")
    assert json.loads(out) == {"action": "signalled", "run_id": run_id, "reason": ""}
    assert send(db, routes, "evt-3", type="order.refunded")[1] == (
        "ignored: no route for event type 'order.refunded' "
        "(routed types: order.changed, order.placed)\n")

    store = connect(db)
    try:
        [signal] = store.pending_signals("shop", run_id)
        assert (signal.signal_id, signal.name, signal.sender) == ("evt-2", "changed", "storefront")
        assert json.loads(signal.payload)["payload"] == {"qty": 2}
        assert len(store.list_runs("shop")) == 1
        assert store.entity_owner("shop", "order-7") == run_id
    finally:
        store.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--payload", "{sku"], "invalid JSON for --payload"),
        (["--payload", '{"sku": 7}'], "event type 'order.placed': invalid input for flow "
                                      "'order'"),
        (["--occurred-at", "2024-05-01T10:00:00"], "occurred_at: Input should have timezone"),
    ],
)
def test_events_send_refuses_bad_events_with_the_reason(
    db: str, routes: str, extra: list[str], message: str
) -> None:
    code, _, err = send(db, routes, "evt-1", *extra)
    assert code == 2
    assert err.startswith("underway: error: ") and message in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_here:routes", "no module named 'no_such_module_here'"),
        ("routes", "must be module:attribute"),
        ("json:nothing", "json has no attribute 'nothing'"),
        ("json:__name__", "--routes 'json:__name__' is a str; it must be Routes"),
        ("json:dumps", "--routes 'json:dumps': calling dumps() failed: TypeError"),
    ],
)
def test_events_send_explains_a_bad_routes_option(db: str, spec: str, message: str) -> None:
    code, _, err = send(db, spec, "evt-1")
    assert code == 2
    assert err.startswith("underway: error: ") and message in err


def test_events_send_as_a_command_imports_routes_from_the_current_directory(
    db: str, routes: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(UNDERWAY), "events", "send", "--entity", "order-9", "--type", "order.placed",
         "--source", "pos", "--key", "evt-9", "--payload", '{"sku": "B-2"}',
         "--routes", routes, "--db", db],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("started run ")


# -- the user documentation ---------------------------------------------------------------

DOC = Path(__file__).parents[2] / "docs" / "schedules-and-intake.md"


def test_the_documented_example_runs_as_written(tmp_path: Path) -> None:
    text = DOC.read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    printed = re.findall(r"prints\n\n```\n(.*?)```", text, re.S)[0]
    (tmp_path / "example.py").write_text(example)
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == printed
    # Delivered again, every event is a duplicate and nothing changes.
    again = printed.replace("started duplicate signalled", "duplicate duplicate duplicate")
    assert outputs[1] == again
