"""Every command that takes ``--app`` imports it as ``underway worker`` does: a module in
the current directory is found, by a real ``underway`` process started there, with
nothing on ``PYTHONPATH``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakes.cli_commands import with_option

UNDERWAY = Path(sys.executable).with_name("underway")

SHOP = textwrap.dedent('''
    from pydantic import BaseModel
    from underway import Flow, RunContext, tool

    @tool(amount="amount", currency="INR")
    def pay_supplier(args):
        return {"paid": args["amount"]}

    class Order(BaseModel):
        sku: str

    class Notes(BaseModel):
        done: bool = False

    shop = Flow("replenish", input=Order, state=Notes)

    @shop.step(start=True)
    async def order(ctx: RunContext[Order, Notes]):
        return ctx.done({"sku": ctx.input.sku})

    app = [shop, pay_supplier]
''')

POLICY = textwrap.dedent('''
    version = "shop-1"

    [[rules]]
    id = "big-payments"
    outcome = "require_approval"
    approver_role = "procurement"
    tools = ["pay_supplier"]
    amount = { op = ">", value = "100000", currency = "INR" }
''')


def underway(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "UNDERWAY_DB")}
    return subprocess.run([str(UNDERWAY), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture
def shop_dir(tmp_path: Path) -> Path:
    """A folder holding the app's module, as a user's project does."""
    (tmp_path / "shopapp.py").write_text(SHOP)
    (tmp_path / "policy.toml").write_text(POLICY)
    return tmp_path


def _started(shop_dir: Path, db: str) -> str:
    done = underway(shop_dir, "runs", "start", "replenish", "--input", '{"sku": "A-7"}',
                    "--app", "shopapp:app", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    return str(done.stdout.split('"run_id": "')[1].split('"')[0])


def _migrated(shop_dir: Path) -> str:
    db = f"sqlite:///{shop_dir / 'shop.db'}"
    assert underway(shop_dir, "db", "migrate", "--db", db).returncode == 0
    return db


def test_policy_explain_finds_the_app_in_the_current_directory(shop_dir: Path) -> None:
    done = underway(shop_dir, "policy", "explain", "policy.toml", "--tool", "pay_supplier",
                    "--args", '{"amount": 232000}', "--app", "shopapp:app")
    assert done.returncode == 0, done.stderr
    assert "require_approval" in done.stdout and "big-payments" in done.stdout


def test_runs_start_and_fork_find_the_app(shop_dir: Path) -> None:
    db = _migrated(shop_dir)
    run = _started(shop_dir, db)
    done = underway(shop_dir, "runs", "fork", run[:8], "--at", "1", "--by", "ops",
                    "--app", "shopapp:app", "--db", db)
    assert done.returncode == 0, done.stderr


def test_deploy_check_and_replay_find_the_app(shop_dir: Path) -> None:
    db = _migrated(shop_dir)
    run = _started(shop_dir, db)
    done = underway(shop_dir, "deploy", "check", "--app", "shopapp:app", "--db", db)
    assert done.returncode == 0, done.stderr + done.stdout
    done = underway(shop_dir, "replay", run, "--app", "shopapp:app", "--db", db)
    assert "no module named" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", [["worker"], ["serve"]])
def test_long_running_commands_load_the_app_before_the_database(
    shop_dir: Path, command: list[str],
) -> None:
    """The worker and the server load the app first: with an unreachable database they
    get as far as the database, so the app was found."""
    done = underway(shop_dir, *command, "--app", "shopapp:app",
                    "--db", f"sqlite:///{shop_dir / 'missing' / 'x.db'}")
    assert done.returncode != 0
    assert "shopapp" not in done.stderr, done.stderr
    assert "database" in done.stderr.lower() or "x.db" in done.stderr, done.stderr


def test_an_app_that_is_nowhere_is_named(shop_dir: Path) -> None:
    done = underway(shop_dir, "policy", "explain", "policy.toml", "--tool", "pay_supplier",
                    "--args", "{}", "--app", "elsewhere:app")
    assert done.returncode == 2
    assert "no module named 'elsewhere'" in done.stderr


def test_every_command_with_an_app_option_is_covered() -> None:
    """A new command with --app joins the tests above (the intake commands and `events
    send` check input with it: tests/integration/intake/test_maildir_intake.py and
    tests/adversarial/test_bad_intake_messages.py)."""
    assert with_option("--app") == {"policy explain", "runs start", "runs fork", "deploy check",
                        "replay", "worker", "serve", "drill", "intake nats",
                        "intake rabbitmq", "intake maildir", "events send"}
