"""Escalations other than questions — an unknown outcome, a deadline, a budget — are settled
by a resolution signed like an approval (``underway approvals resolve``), verified by the
run before it changes anything; a worker with ``signed_resolutions`` refuses unsigned ones.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway import events as ev
from underway.cli import app
from underway.clock import ManualClock
from underway.errors import SignedResolutionRequired
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.guard.approvals.notify import ApprovalNotice
from underway.journal.state import ANSWER_SIGNAL
from underway.runner import Runner

CHARGED: list[str] = []


class Crash(BaseException):
    """Abandons an activation mid-call, as a SIGKILL would."""


class Charge(BaseModel):
    invoice: str = "INV-7"
    amount: int = 500


class Notes(BaseModel):
    pass


@uw.tool(irreversible=True)
async def charge_card(args: Charge, info: uw.CallInfo) -> dict[str, Any]:
    """Charge a card; the first call dies after the charge went through."""
    CHARGED.append(info.key)
    if len(CHARGED) == 1:
        raise Crash
    return {"receipt": f"r-{len(CHARGED)}"}


billing: uw.Flow[Notes, Charge] = uw.Flow("billing", state=Notes, input=Charge,
                                          tools=[charge_card])


@billing.step
async def pay(ctx: uw.RunContext[Notes, Charge]) -> Any:
    try:
        return ctx.done(await ctx.call(charge_card, ctx.input.model_dump()))
    except uw.ToolCallError as exc:
        return ctx.done({"failed": exc.error_type})


class Recorder:
    """A notifier that keeps what it was told."""

    def __init__(self) -> None:
        self.notices: list[ApprovalNotice] = []

    async def notify(self, notice: ApprovalNotice) -> None:
        self.notices.append(notice)


class World:
    """A SQLite database, a manual clock and an engine, as a worker would run them."""

    def __init__(self, url: str, *, signed_resolutions: bool = False) -> None:
        self.url = url
        # Starts now: the command line stamps what it sends with the real time.
        self.clock = ManualClock(time.time())
        self.notifier = Recorder()
        self.engine = uw.Engine(uw.connect(url), flows=[billing], clock=self.clock,
                                notifier=self.notifier, signed_resolutions=signed_resolutions)
        CHARGED.clear()

    def escalate(self, run_id: str) -> uw.RunState:
        """Start a charge whose worker dies mid-call; the next worker escalates it."""
        self.engine.start(billing, {}, run_id=run_id)
        with pytest.raises(Crash):
            self.drive()
        self.clock.advance(self.engine.lease_ttl + 1)
        self.drive()
        s = self.state(run_id)
        assert s.status == "escalated" and s.escalation is not None
        assert s.escalation.cause == "unknown_outcome"
        return s

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def state(self, run_id: str) -> uw.RunState:
        return self.engine.state(run_id)

    def events(self, run_id: str, kind: type[ev.Event]) -> list[Any]:
        return [r.event for r in self.engine.journal.history("default", run_id)
                if isinstance(r.event, kind)]

    def register(self, name: str, *roles: str) -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        register_approver(self.engine.store, name, public_key=public_key_of(key), roles=roles,
                          now=self.clock.now())
        return key


@pytest.fixture
def world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url)
    yield w
    w.engine.store.close()


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[World]:
    w = World(f"sqlite:///{tmp_path}/strict.db", signed_resolutions=True)
    yield w
    w.engine.store.close()


def cli(*args: str, db: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--db", db] if db else list(args))
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def key_file(world: World, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.pem"
    code, out, _ = cli("keys", "new", "--out", str(path), "--approver", name)
    assert code == 0
    match = re.search(r"public key: (\S+)", out)
    assert match is not None
    assert cli("approvers", "add", name, "--public-key", match.group(1), "--role", "ops",
               db=world.url)[0] == 0
    return path


def resolution(world: World, s: uw.RunState, key: Ed25519PrivateKey, approver: str = "alice",
               **changes: Any) -> dict[str, Any]:
    """A resolve decision on the run's escalation, signed with ``key``."""
    esc = s.escalation
    assert esc is not None
    call = next(c for c in s.calls if c.key == esc.key)
    fields: dict[str, Any] = {
        "request_id": esc.request_id, "run_id": s.run_id, "tenant_id": s.tenant_id,
        "tool": esc.tool, "args_hash": call.args_hash, "decision": "resolve",
        "expires_at": world.clock.now() + 3600, "approver_id": approver,
        "answer": {"resolution": "succeeded", "result": {"receipt": "r-1"}},
    }
    fields.update(changes)
    return sign_decision(key, **fields).model_dump(mode="json")


def smuggle(world: World, decision: dict[str, Any]) -> None:
    """Put a decision straight into the run's inbox, past ``submit_decision``'s checks, as
    someone with write access to the database could: the run must refuse it itself."""
    world.engine.client._send(decision["run_id"], ANSWER_SIGNAL, decision, "default", None,
                              "attacker")


# -- the command line ------------------------------------------------------------------------


def test_an_unknown_outcome_is_listed_shown_and_resolved_with_a_signature(
    world: World, tmp_path: Path,
) -> None:
    alice = key_file(world, tmp_path, "alice")
    s = world.escalate("pay-1")
    [call] = s.calls

    code, out, _ = cli("approvals", "ls", "--json", db=world.url)
    assert code == 0
    [listed] = json.loads(out)
    assert listed["kind"] == "resolution" and listed["tool"] == "charge_card"
    assert listed["request_id"] == s.escalation.request_id
    assert listed["cause"] == "unknown_outcome"

    code, out, _ = cli("approvals", "show", "pay-1", db=world.url)
    assert code == 0
    assert "escalated:" in out and "(cause unknown_outcome)" in out
    assert "tool 'charge_card'" in out and '"invoice": "INV-7"' in out
    assert "approvals resolve" in out

    code, _, err = cli("approvals", "answer", "pay-1", "--key", str(alice), "--as", "alice",
                       "--answer", "yes", db=world.url)
    assert code == 2 and "approvals resolve" in err
    code, out, err = cli("approvals", "resolve", "pay-1", "--key", str(alice), "--as",
                         "alice", "--outcome", "succeeded", "--result", '{"receipt": "r-1"}',
                         "--comment", "the bank shows the charge", db=world.url)
    assert code == 0, err
    assert "resolution of 'charge_card'" in out and "sent to run 'pay-1'" in out

    world.drive()
    done = world.state("pay-1")
    assert done.status == "completed" and done.result == {"receipt": "r-1"}
    assert CHARGED == ["pay-1:0:pay:0"]  # the charge was never repeated
    [resolved] = world.events("pay-1", ev.EscalationResolved)
    assert resolved.by == "alice" and resolved.resolution == "succeeded"
    assert resolved.decision["comment"] == "the bank shows the charge"
    assert resolved.decision["args_hash"] == call.args_hash and call.tool == "charge_card"


@pytest.mark.parametrize(("outcome", "result", "charges"), [
    ("retry", {"receipt": "r-2"}, 2),  # run again, with the same key
    ("failed", {"failed": "EscalationResolved"}, 1),  # the step hears a failed call
])
def test_a_signed_retry_or_failure_reaches_the_step(
    world: World, tmp_path: Path, outcome: str, result: dict[str, Any], charges: int,
) -> None:
    alice = key_file(world, tmp_path, "alice")
    world.escalate("pay-2")
    code, _, err = cli("approvals", "resolve", "pay-2", "--key", str(alice), "--as", "alice",
                       "--outcome", outcome, db=world.url)
    assert code == 0, err
    world.drive()
    assert world.state("pay-2").result == result
    assert len(CHARGED) == charges and set(CHARGED) == {"pay-2:0:pay:0"}


def test_resolve_names_bad_options(world: World, tmp_path: Path) -> None:
    alice = key_file(world, tmp_path, "alice")
    world.escalate("pay-4")
    base = ["approvals", "resolve", "pay-4", "--key", str(alice), "--as", "alice"]
    code, _, err = cli(*base, "--outcome", "maybe", db=world.url)
    assert code == 2 and "--outcome must be one of succeeded, failed, retry" in err
    code, _, err = cli(*base, "--outcome", "failed", "--result", "{}", db=world.url)
    assert code == 2 and "--result goes with --outcome succeeded only" in err
    code, _, err = cli(*base, "--outcome", "succeeded", "--result", "{nope", db=world.url)
    assert code == 2 and "--result is not JSON" in err
    world.drive()
    assert world.state("pay-4").status == "escalated"
    assert world.events("pay-4", ev.ApprovalInvalid) == []  # nothing was sent


# -- what the run refuses --------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "reason"), [
    ({"args_hash": "0" * 64}, "args_mismatch"),
    ({"tool": "other_tool"}, "wrong_tool"),
    ({"request_id": "escalation-1"}, "not_pending"),
    ({"answer": {"resolution": "maybe"}}, "malformed_resolution"),
    ({"answer": {"resolution": "succeeded", "extra": 1}}, "malformed_resolution"),
    ({"decision": "answer"}, "not_pending"),
])
def test_a_resolution_for_anything_else_is_refused_and_journaled(
    world: World, changes: dict[str, Any], reason: str,
) -> None:
    key = world.register("alice", "ops")
    s = world.escalate("pay-5")
    decision = resolution(world, s, key, **changes)
    if reason == "malformed_resolution":
        with pytest.raises(uw.ConfigurationError, match="resolve decision's answer must be"):
            world.engine.submit_decision(decision)
        smuggle(world, decision)
    else:
        assert world.engine.submit_decision(decision)
    world.drive()
    assert world.state("pay-5").status == "escalated"
    [invalid] = world.events("pay-5", ev.ApprovalInvalid)
    assert invalid.reason == reason
    assert world.events("pay-5", ev.EscalationResolved) == []
    assert CHARGED == ["pay-5:0:pay:0"]


def test_a_forged_or_unregistered_signature_is_refused(world: World) -> None:
    world.register("alice", "ops")
    s = world.escalate("pay-6")
    mallory = Ed25519PrivateKey.generate()
    forged = resolution(world, s, mallory)  # signs as alice
    unknown = resolution(world, s, mallory, approver="mallory")
    with pytest.raises(uw.ConfigurationError, match=r"\(bad_signature\)"):
        world.engine.submit_decision(forged)
    with pytest.raises(uw.ConfigurationError, match=r"\(unknown_approver\)"):
        world.engine.submit_decision(unknown)
    smuggle(world, forged)
    smuggle(world, unknown)
    world.drive()
    assert sorted(e.reason for e in world.events("pay-6", ev.ApprovalInvalid)) == [
        "bad_signature", "unknown_approver",
    ]
    assert world.state("pay-6").status == "escalated"


def test_a_resolution_cannot_be_replayed_on_a_later_escalation(world: World) -> None:
    key = world.register("alice", "ops")
    s = world.escalate("pay-7")
    retry = resolution(world, s, key, answer={"resolution": "retry", "result": None})
    world.engine.submit_decision(retry)
    # The retried call dies again: a second escalation of the same call.
    CHARGED.clear()
    with pytest.raises(Crash):
        world.drive()
    world.clock.advance(world.engine.lease_ttl + 1)
    world.drive()
    again = world.state("pay-7")
    assert again.status == "escalated"
    assert again.escalation.request_id != s.escalation.request_id
    replayed = {**retry, "nonce": "f" * 32}  # a fresh nonce breaks the signature
    with pytest.raises(uw.ConfigurationError, match=r"\(bad_signature\)"):
        world.engine.submit_decision(replayed)
    smuggle(world, replayed)
    # The very same decision is not even delivered twice (its nonce names the signal).
    assert not world.engine.submit_decision(retry)
    world.drive()
    assert [e.reason for e in world.events("pay-7", ev.ApprovalInvalid)] == ["not_pending"]
    assert world.state("pay-7").status == "escalated"


# -- a worker that requires signatures -------------------------------------------------------


def test_a_strict_worker_refuses_unsigned_resolutions(strict: World) -> None:
    key = strict.register("alice", "ops")
    s = strict.escalate("pay-8")
    with pytest.raises(SignedResolutionRequired, match="unsigned resolution is refused"):
        strict.engine.resolve("pay-8", resolution="succeeded", result={"receipt": "x"},
                              by="ops")
    # Sent by a client that does not know the setting: the worker refuses it in any case.
    uw.Client(strict.engine.store, clock=strict.clock).resolve(
        "pay-8", resolution="succeeded", result={"receipt": "x"}, by="ops")
    strict.drive()
    assert strict.state("pay-8").status == "escalated"
    [ignored] = strict.events("pay-8", ev.SignalIgnored)
    assert "unsigned resolution refused" in ignored.reason

    strict.engine.submit_decision(resolution(strict, s, key))
    strict.drive()
    assert strict.state("pay-8").result == {"receipt": "r-1"}
    assert CHARGED == ["pay-8:0:pay:0"]


def test_an_unsigned_resolution_still_works_by_default(world: World) -> None:
    world.escalate("pay-9")
    world.engine.resolve("pay-9", resolution="succeeded", result={"receipt": "x"}, by="ops")
    world.drive()
    assert world.state("pay-9").result == {"receipt": "x"}
    [resolved] = world.events("pay-9", ev.EscalationResolved)
    assert resolved.by == "ops" and resolved.decision is None


# -- people are told -------------------------------------------------------------------------


def test_approvers_are_notified_of_an_escalation_once_it_is_durable(world: World) -> None:
    s = world.escalate("pay-10")
    [notice] = world.notifier.notices
    assert notice.kind == "escalation" and notice.run_id == "pay-10"
    assert notice.request_id == s.escalation.request_id
    assert notice.tool == "charge_card" and "charge_card" in (notice.question or "")


def test_an_escalation_notice_says_how_to_resolve_it() -> None:
    from underway.guard.approvals.notify import email_body

    body = email_body(ApprovalNotice(
        tenant_id="acme", run_id="pay-11", request_id="escalation-5", tool="charge_card",
        args=None, kind="escalation", question="outcome of 'charge_card' is unknown",
    ))
    assert "Escalated: outcome of 'charge_card' is unknown" in body
    assert "Call: charge_card" in body and "Expires: never" in body
    assert ("underway approvals resolve pay-11 --tenant acme --key FILE --as YOU "
            "--outcome succeeded|failed|retry") in body
    assert "approvals approve" not in body
