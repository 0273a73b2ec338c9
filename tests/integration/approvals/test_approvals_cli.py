"""``underway keys``, ``underway approvers`` and ``underway approvals`` on a real SQLite
database: make a key, register it, review what a run asks, sign and send a decision, and
see the run act on it (or refuse it)."""

from __future__ import annotations

import asyncio
import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway import events as ev
from underway.cli import app
from underway.guard.policy import policy_from_dict
from underway.runner import Runner

# -- a flow whose large refunds need a signed approval, and one that asks a question --------

PAID: list[dict[str, Any]] = []


class Refund(BaseModel):
    invoice: str = "INV-1"
    amount: float = 25000.0
    currency: str = "INR"


class Notes(BaseModel):
    outcome: Any = None


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def issue_refund(args: Refund, info: uw.CallInfo) -> dict[str, Any]:
    """Refund part of an invoice."""
    PAID.append(args.model_dump())
    return {"refund_id": f"rf-{args.invoice}"}


POLICY = policy_from_dict({
    "version": "v1",
    "rules": [
        {"id": "refund-large", "tools": ["issue_refund"], "outcome": "require_approval",
         "approver_role": "finance",
         "amount": {"op": ">", "value": "10000", "currency": "INR"}},
    ],
})

refunds: uw.Flow[Notes, Refund] = uw.Flow("refunds", state=Notes, input=Refund,
                                          tools=[issue_refund])


@refunds.step
async def pay(ctx: uw.RunContext[Notes, Refund]) -> Any:
    try:
        out = await ctx.call(issue_refund, ctx.input.model_dump(),
                             evidence={"ticket": "T-42"}, risks=["money leaves the company"])
    except uw.ToolCallError as exc:
        return ctx.done({"refused": exc.error_type, "message": exc.message})
    return ctx.done(out)


curious: uw.Flow[Notes, Any] = uw.Flow("curious", state=Notes)


@curious.step
async def ask(ctx: uw.RunContext[Notes, Any]) -> Any:
    answer = await ctx.ask("Which warehouse ships it?", context={"options": ["A", "B"]},
                           role="support")
    return ctx.done({"answer": answer})


class World:
    """A SQLite database with an engine that runs the flows, as a worker would."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = uw.Engine(uw.connect(url), flows=[refunds, curious])
        self.engine.guard.policy = POLICY
        PAID.clear()

    def start(self, flow: uw.Flow[Any, Any], run_id: str, input: Any = None,
              tenant: str = "default") -> None:
        self.engine.start(flow, input, run_id=run_id, tenant_id=tenant)
        self.drive()

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def state(self, run_id: str, tenant: str = "default") -> uw.RunState:
        return self.engine.state(run_id, tenant_id=tenant)

    def events(self, run_id: str, kind: type[ev.Event]) -> list[Any]:
        return [r.event for r in self.engine.journal.history("default", run_id)
                if isinstance(r.event, kind)]


@pytest.fixture
def world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url)
    yield w
    w.engine.store.close()


def cli(*args: str, db: str | None = None) -> tuple[int, str, str]:
    argv = [*args, "--db", db] if db else list(args)
    result = CliRunner().invoke(app, argv)
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def new_key(tmp_path: Path, name: str) -> tuple[Path, str]:
    path = tmp_path / f"{name}.pem"
    code, out, _ = cli("keys", "new", "--out", str(path), "--approver", name)
    assert code == 0
    match = re.search(r"public key: (\S+)", out)
    assert match is not None
    return path, match.group(1)


def register(world: World, tmp_path: Path, name: str, *roles: str) -> Path:
    path, public = new_key(tmp_path, name)
    args = ["approvers", "add", name, "--public-key", public]
    for role in roles:
        args += ["--role", role]
    assert cli(*args, db=world.url)[0] == 0
    return path


# -- keys ------------------------------------------------------------------------------------


def test_keys_new_writes_an_owner_only_key_and_prints_how_to_register_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "alice.pem"
    code, out, _ = cli("keys", "new", "--out", str(path), "--approver", "alice")
    assert code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    public = re.search(r"public key: (\S+)", out)
    assert public is not None
    assert f"underway approvers add alice --public-key {public.group(1)} --role ROLE" in out


def test_keys_new_never_overwrites_a_file(tmp_path: Path) -> None:
    path = tmp_path / "alice.pem"
    path.write_text("precious")
    code, _, err = cli("keys", "new", "--out", str(path))
    assert code == 2
    assert "refusing to overwrite" in err
    assert path.read_text() == "precious"


# -- approvers -------------------------------------------------------------------------------


def test_approvers_add_ls_and_revoke(world: World, tmp_path: Path) -> None:
    _, public = new_key(tmp_path, "alice")
    code, out, _ = cli("approvers", "add", "alice", "--public-key", public, "--role",
                       "finance", "--role", "ops", db=world.url)
    assert code == 0 and "roles finance, ops" in out
    code, out, _ = cli("approvers", "ls", "--json", db=world.url)
    [alice] = json.loads(out)
    assert alice["approver_id"] == "alice" and alice["public_key"] == public
    assert alice["roles"] == ["finance", "ops"] and alice["revoked_at"] is None
    code, out, _ = cli("approvers", "ls", db=world.url)
    assert "alice" in out and public in out and "finance,ops" in out

    assert cli("approvers", "revoke", "alice", db=world.url)[0] == 0
    [alice] = json.loads(cli("approvers", "ls", "--json", db=world.url)[1])
    assert alice["revoked_at"] is not None
    code, _, err = cli("approvers", "revoke", "alice", db=world.url)
    assert code == 2 and "already revoked" in err
    code, _, err = cli("approvers", "revoke", "nobody", db=world.url)
    assert code == 2 and "no approver 'nobody'" in err


def test_approvers_are_per_tenant(world: World, tmp_path: Path) -> None:
    _, public = new_key(tmp_path, "alice")
    cli("approvers", "add", "alice", "--public-key", public, "--role", "finance",
        "--tenant", "acme", db=world.url)
    assert "no approvers in tenant 'default'" in cli("approvers", "ls", db=world.url)[1]
    assert "alice" in cli("approvers", "ls", "--tenant", "acme", db=world.url)[1]


def test_approvers_add_refuses_a_bad_key_or_role(world: World) -> None:
    code, _, err = cli("approvers", "add", "alice", "--public-key", "AAAA", "--role", "x",
                       db=world.url)
    assert code == 2 and "decodes to 3 bytes" in err
    code, _, err = cli("approvers", "add", "alice", "--public-key", "AAAA", db=world.url)
    assert code == 2 and "--role" in err


# -- approvals: the whole round trip ---------------------------------------------------------


def test_an_approval_signed_on_the_command_line_lets_the_run_act(
    world: World, tmp_path: Path,
) -> None:
    alice = register(world, tmp_path, "alice", "finance")
    world.start(refunds, "refund-1", {"amount": 25000})
    assert world.state("refund-1").status == "waiting" and PAID == []

    code, out, _ = cli("approvals", "ls", db=world.url)
    assert code == 0
    [line] = out.splitlines()[1:]
    row = line.split()
    assert row[:2] == ["refund-1", "approval"] and "finance" in row
    # The summary names the call and the money the guard read, in Indian grouping.
    assert "Call issue_refund: moves ₹25,000.00" in line
    assert row[-3:] == ["in", "24.0h", "-"]  # time left, then the run's labels (none)

    code, out, _ = cli("approvals", "show", "refund-1", db=world.url)
    assert code == 0
    assert out.splitlines()[:2] == ["summary:       Call issue_refund: moves ₹25,000.00",
                                    "money:         moves ₹25,000.00"]
    # Evidence and risks come before the call's details.
    assert out.index("money leaves the company") < out.index("call tool 'issue_refund'")
    assert "call tool 'issue_refund'" in out and '"amount": 25000' in out
    assert '"ticket": "T-42"' in out and "money leaves the company" in out
    assert "required role: finance" in out and re.search(r"expires: +\d{4}-\d\d-\d\dT", out)

    code, out, err = cli("approvals", "approve", "refund-1", "--key", str(alice), "--as",
                         "alice", "--comment", "checked the invoice", db=world.url)
    assert code == 0, err
    assert "approval of 'issue_refund'" in out and "sent to run 'refund-1'" in out

    world.drive()
    s = world.state("refund-1")
    assert s.status == "completed" and s.result == {"refund_id": "rf-INV-1"}
    assert len(PAID) == 1
    [granted] = world.events("refund-1", ev.ApprovalGranted)
    assert granted.approver_id == "alice"
    assert granted.decision["comment"] == "checked the invoice"
    assert "waits for no approval" in cli("approvals", "show", "refund-1", db=world.url)[2]


def test_a_rejection_signed_on_the_command_line_reaches_the_step(
    world: World, tmp_path: Path,
) -> None:
    bob = register(world, tmp_path, "bob", "finance")
    world.start(refunds, "refund-2", {"amount": 30000})
    code, _, err = cli("approvals", "reject", "refund-2", "--key", str(bob), "--as", "bob",
                       "--comment", "already refunded", db=world.url)
    assert code == 0, err
    world.drive()
    result = world.state("refund-2").result
    assert result["refused"] == "ApprovalRejected" and "already refunded" in result["message"]
    assert PAID == []


def test_an_answer_signed_on_the_command_line_resumes_the_question(
    world: World, tmp_path: Path,
) -> None:
    carol = register(world, tmp_path, "carol", "support")
    world.start(curious, "q-1")
    assert world.state("q-1").status == "escalated"
    code, out, _ = cli("approvals", "show", "q-1", db=world.url)
    assert "question:      Which warehouse ships it?" in out and '"A"' in out
    code, out, _ = cli("approvals", "ls", "--json", db=world.url)
    assert [r["kind"] for r in json.loads(out)] == ["question"]

    code, _, err = cli("approvals", "approve", "q-1", "--key", str(carol), "--as", "carol",
                       db=world.url)
    assert code == 2 and "approvals answer" in err
    code, _, err = cli("approvals", "answer", "q-1", "--key", str(carol), "--as", "carol",
                       "--answer", '{"warehouse": "B"}', db=world.url)
    assert code == 0, err
    world.drive()
    assert world.state("q-1").result == {"answer": {"warehouse": "B"}}


def test_the_command_line_signs_over_jcs_and_refuses_what_jcs_cannot_hold(
    world: World, tmp_path: Path,
) -> None:
    carol = register(world, tmp_path, "carol", "support")
    world.start(curious, "q-2")
    code, _, err = cli("approvals", "answer", "q-2", "--key", str(carol), "--as", "carol",
                       "--answer", '{"units": 12345678901234567890}', db=world.url)
    assert code == 2 and "past 2**53 as a string" in err, err
    world.drive()
    assert world.state("q-2").status == "escalated"  # nothing was sent

    answer = {"units": "12345678901234567890", "w": 2.0, "é": [1e-7, 1e21]}
    code, _, err = cli("approvals", "answer", "q-2", "--key", str(carol), "--as", "carol",
                       "--answer", json.dumps(answer), db=world.url)
    assert code == 0, err
    world.drive()
    [answered] = world.events("q-2", ev.EscalationAnswered)
    assert answered.decision["canon"] == "jcs"
    assert world.state("q-2").result == {"answer": answer}


def test_a_decision_the_run_would_refuse_is_not_sent(world: World, tmp_path: Path) -> None:
    intern = register(world, tmp_path, "ivan", "intern")
    alice = register(world, tmp_path, "alice", "finance")
    world.start(refunds, "refund-3", {"amount": 25000})

    code, _, err = cli("approvals", "approve", "refund-3", "--key", str(intern), "--as",
                       "ivan", db=world.url)
    assert code == 2 and "lacks the role" in err and "missing_role" in err
    code, _, err = cli("approvals", "approve", "refund-3", "--key", str(intern), "--as",
                       "alice", db=world.url)
    assert code == 2 and "not the one registered for approver 'alice'" in err
    code, _, err = cli("approvals", "approve", "refund-3", "--key", str(alice), "--as",
                       "nobody", db=world.url)
    assert code == 2 and "no approver 'nobody'" in err
    cli("approvers", "revoke", "alice", db=world.url)
    code, _, err = cli("approvals", "approve", "refund-3", "--key", str(alice), "--as",
                       "alice", db=world.url)
    assert code == 2 and "revoked" in err

    world.drive()
    assert world.state("refund-3").status == "waiting"
    assert world.events("refund-3", ev.ApprovalInvalid) == []  # nothing reached the run


def test_approvals_name_the_run_and_key_problems(world: World, tmp_path: Path) -> None:
    code, _, err = cli("approvals", "show", "nope", db=world.url)
    assert code == 2 and "no run 'nope'" in err
    code, out, _ = cli("approvals", "ls", db=world.url)
    assert code == 0 and "no runs wait for a person" in out
    code, _, err = cli("approvals", "approve", "nope", "--key", str(tmp_path / "none.pem"),
                       "--as", "alice", db=world.url)
    assert code == 2 and "no private key file" in err
