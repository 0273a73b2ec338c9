"""What a client sends to a run is checked before it is sent.

``submit_decision`` refuses, with a ``ConfigurationError`` naming the problem, a decision
that could never pass (malformed, incomplete, for another tenant, unsigned, signed by a key
that is not the approver's, expired) and delivers nothing; it returns False only for the
same decision sent twice. A signal whose name the run's flow does not declare is refused by
the engine, by a client engine without the flow's code, by ``underway runs signal`` and by
``underway events send`` (exit 2), and nothing is delivered; a flow that declares no signals
gets every name, and the command line warns.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.clock import ManualClock
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.guard.policy import policy_from_dict

PAID: list[dict[str, Any]] = []


class S(BaseModel):
    pass


@uw.tool(irreversible=True)
async def pay(args: dict[str, Any]) -> dict[str, Any]:
    """Move money (held for approval by the policy)."""
    PAID.append(args)
    return {"ok": True}


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "hold", "tools": ["pay"], "outcome": "require_approval", "approver_role": "ops",
     "expires_in": 3600},
]})

held = uw.Flow("held_payment", state=S, tools=[pay], policy=POLICY)


@held.step
async def pay_once(ctx: uw.RunContext[S, Any]) -> Any:
    await ctx.call(pay, {"to": "ACME", "amount": 10})
    return ctx.done("paid")


def cli(*args: str, db: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--db", db])
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def drive(engine: uw.Engine, run_id: str) -> uw.RunState:
    asyncio.run(uw.Runner(engine).run_until_idle())
    return engine.state(run_id)


@pytest.fixture
def engine(db_url: str) -> Iterator[uw.Engine]:
    PAID.clear()
    store = uw.connect(db_url)
    yield uw.Engine(store, flows=[held], clock=ManualClock(1.8e9))
    store.close()


# -- decisions -------------------------------------------------------------------------------


@pytest.fixture
def waiting(engine: uw.Engine) -> tuple[uw.RunState, Ed25519PrivateKey]:
    """A run waiting for approval of its payment, and alice's key (registered, role ops)."""
    key = Ed25519PrivateKey.generate()
    register_approver(engine.store, "alice", public_key=public_key_of(key), roles=["ops"],
                      now=engine.clock.now())
    run_id, _ = engine.start(held)
    s = drive(engine, run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    return s, key


def decision(s: uw.RunState, key: Any, **changes: Any) -> dict[str, Any]:
    req = s.pending_approval
    assert req is not None
    fields: dict[str, Any] = {
        "request_id": req.request_id, "run_id": s.run_id, "tenant_id": s.tenant_id,
        "tool": req.tool, "args_hash": req.args_hash, "decision": "approve",
        "expires_at": req.expires_at, "approver_id": "alice",
    }
    fields.update(changes)
    return sign_decision(key, **fields).model_dump(mode="json")


def nothing_sent(engine: uw.Engine, run_id: str) -> None:
    assert engine.store.pending_signals("default", run_id) == []
    s = drive(engine, run_id)
    assert s.status == "waiting" and PAID == []


def without(d: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != field}


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda d: "approve", "not a valid signed decision"),
    (lambda d: None, "not a valid signed decision"),
    (lambda d: [d], "not a valid signed decision"),
    (lambda d: without(d, "signature"), "signature: Field required"),
    (lambda d: without(d, "nonce"), "nonce: Field required"),
    (lambda d: without(d, "approver_id"), "approver_id: Field required"),
    (lambda d: without(d, "args_hash"), "args_hash: Field required"),
    (lambda d: d | {"expires_at": "soon"}, "expires_at:"),
    (lambda d: d | {"decision": "maybe"}, "decision:"),
    (lambda d: d | {"run_id": 7}, "run_id:"),
    (lambda d: d | {"bonus": True}, "bonus: Extra inputs are not permitted"),
    (lambda d: d | {"signature": ""}, "(bad_signature)"),
    (lambda d: d | {"signature": "not base64!"}, "(bad_signature)"),
    (lambda d: d | {"args_hash": "0" * 64}, "(bad_signature)"),  # changed after signing
    (lambda d: d | {"approver_id": "mallory"}, "(unknown_approver)"),
    (lambda d: d | {"tenant_id": "other"}, "for tenant 'other' but was submitted to tenant"),
])
def test_a_decision_that_could_never_pass_is_refused_and_not_sent(
    engine: uw.Engine, waiting: tuple[uw.RunState, Any], mangle: Any, message: str,
) -> None:
    s, key = waiting
    with pytest.raises(uw.ConfigurationError) as err:
        engine.submit_decision(mangle(decision(s, key)))
    assert message in str(err.value)
    nothing_sent(engine, s.run_id)


def test_a_decision_signed_by_another_key_or_already_expired_is_refused(
    engine: uw.Engine, waiting: tuple[uw.RunState, Any],
) -> None:
    s, key = waiting
    mallory = Ed25519PrivateKey.generate()
    with pytest.raises(uw.ConfigurationError, match=r"does not verify.*\(bad_signature\)"):
        engine.submit_decision(decision(s, mallory))  # claims to be alice
    soon = decision(s, key, expires_at=engine.clock.now() + 5)
    engine.clock.advance(6)  # type: ignore[attr-defined]
    with pytest.raises(uw.ConfigurationError, match=r"\(expired\)"):
        engine.submit_decision(soon)
    engine.store.revoke_approver("default", "alice", at=engine.clock.now())
    with pytest.raises(uw.ConfigurationError, match=r"\(revoked\)"):
        engine.submit_decision(decision(s, key))
    nothing_sent(engine, s.run_id)


def test_a_decision_for_an_unknown_run_is_refused(
    engine: uw.Engine, waiting: tuple[uw.RunState, Any],
) -> None:
    s, key = waiting
    with pytest.raises(uw.RunNotFound):
        engine.submit_decision(decision(s, key, run_id="no-such-run"))
    nothing_sent(engine, s.run_id)


def test_a_valid_decision_is_delivered_once_and_false_only_for_the_duplicate(
    engine: uw.Engine, waiting: tuple[uw.RunState, Any],
) -> None:
    s, key = waiting
    d = decision(s, key)
    assert engine.submit_decision(d) is True
    assert engine.submit_decision(d) is False
    assert drive(engine, s.run_id).status == "completed"
    assert PAID == [{"to": "ACME", "amount": 10}]
    assert engine.submit_decision(d) is False, "still only a duplicate after the run finished"


# -- signals ---------------------------------------------------------------------------------


class Box(BaseModel):
    got: Any = None


def signal_flow(name: str, signals: list[str] | None, waits_for: str = "go") -> uw.Flow[Box, Any]:
    flow: uw.Flow[Box, Any] = uw.Flow(name, state=Box, signals=signals)

    @flow.step
    async def wait(ctx: uw.RunContext[Box, Any]) -> Any:
        return ctx.wait(waits_for, then=read)

    @flow.step
    async def read(ctx: uw.RunContext[Box, Any]) -> Any:
        return ctx.done(ctx.signal)

    return flow


def test_flows_refuse_a_bad_declaration() -> None:
    with pytest.raises(uw.ConfigurationError, match="not the string"):
        uw.Flow("f", state=Box, signals="go")  # type: ignore[arg-type]
    with pytest.raises(uw.ConfigurationError, match="reserved"):
        uw.Flow("f", state=Box, signals=["go", "underway.cancel"])
    with pytest.raises(uw.ConfigurationError, match="non-empty"):
        uw.Flow("f", state=Box, signals=[""])


def test_an_undeclared_signal_is_refused_everywhere_and_never_delivered(db_url: str) -> None:
    flow = signal_flow("declared", ["go", "stop"])
    store = uw.connect(db_url)
    engine = uw.Engine(store, flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        assert drive(engine, run_id).status == "waiting"
        with pytest.raises(uw.ConfigurationError, match=r"declares \(go, stop\); 'og' is not"):
            engine.signal(run_id, "og", {"n": 1})
        # A client without the flow's code reads the declaration from the journal.
        client = uw.Engine(store)
        assert client.declared_signals(run_id) == frozenset({"go", "stop"})
        with pytest.raises(uw.ConfigurationError, match="'og' is not one of them"):
            client.signal(run_id, "og")
        code, out, err = cli("runs", "signal", run_id, "og", db=db_url)
        assert code == 2 and "'og' is not one of them" in err and out == ""
        assert store.pending_signals("default", run_id) == []

        code, out, err = cli("runs", "signal", run_id, "go", "--payload", '{"n": 2}', db=db_url)
        assert code == 0 and err == "" and "delivered" in out
        done = drive(engine, run_id)
        assert done.status == "completed" and done.result == {"n": 2}
    finally:
        store.close()


def test_the_signal_a_run_waits_for_is_accepted_even_if_undeclared(db_url: str) -> None:
    # A new version of the flow waits for a name the old declaration lacks.
    flow = signal_flow("renamed", ["go"], waits_for="proceed")
    store = uw.connect(db_url)
    engine = uw.Engine(store, flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        assert drive(engine, run_id).waiting_signal == "proceed"
        assert uw.Engine(store).signal(run_id, "proceed", "ok")
        assert drive(engine, run_id).result == "ok"
    finally:
        store.close()


def test_a_flow_that_declares_no_signals_gets_them_with_a_warning(db_url: str) -> None:
    flow = signal_flow("open", None)
    store = uw.connect(db_url)
    engine = uw.Engine(store, flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        drive(engine, run_id)
        assert engine.declared_signals(run_id) is None
        assert engine.signal(run_id, "anything")
        code, out, err = cli("runs", "signal", run_id, "other", db=db_url)
        assert code == 0 and "delivered" in out
        assert "warning: flow 'open' declares no signals" in err and "'other'" in err
        code, _, err = cli("runs", "signal", run_id, "go", db=db_url)
        assert code == 0 and err == "", "the signal the run waits for needs no warning"
        assert drive(engine, run_id).status == "completed"
    finally:
        store.close()


ROUTES = """
from pydantic import BaseModel
import underway as uw
from underway.scheduling.intake import Routes, Signal, StartFlow


class Box(BaseModel):
    got: object = None


def build(name, signals):
    flow = uw.Flow(name, state=Box, signals=signals)

    @flow.step
    async def wait(ctx):
        return ctx.wait("paid", then=wait)

    return flow


strict, loose = build("strict_order", ["paid"]), build("loose_order", None)
routes = Routes({
    "strict.placed": StartFlow(strict), "loose.placed": StartFlow(loose),
    "order.paid": Signal("paid"), "order.payed": Signal("payed"),
})
"""


@pytest.fixture
def routes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"routes_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(ROUTES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return f"{name}:routes"


def send(db: str, routes: str, entity: str, type: str, key: str) -> tuple[int, str, str]:
    return cli("events", "send", "--entity", entity, "--type", type, "--source", "shop",
               "--key", key, "--routes", routes, db=db)


def test_events_send_refuses_a_signal_the_owner_does_not_declare(db_url: str, routes: str) -> None:
    uw.connect(db_url).close()  # migrated, as `underway db migrate` would
    code, out, err = send(db_url, routes, "o-1", "strict.placed", "k-1")
    assert code == 0 and out.startswith("started run "), err
    strict_run = out.split()[-1]
    code, out, err = send(db_url, routes, "o-1", "order.payed", "k-2")
    assert code == 2 and out == ""
    assert "event type 'order.payed'" in err and "'payed' is not one of them" in err
    code, out, err = send(db_url, routes, "o-1", "order.paid", "k-3")
    assert (code, out, err) == (0, f"signalled run {strict_run}\n", "")

    code, out, _ = send(db_url, routes, "o-2", "loose.placed", "k-4")
    loose_run = out.split()[-1]
    code, out, err = send(db_url, routes, "o-2", "order.payed", "k-5")
    assert code == 0 and out == f"signalled run {loose_run}\n"
    assert "warning: flow 'loose_order' declares no signals" in err

    store = uw.connect(db_url)
    try:
        assert [x.name for x in store.pending_signals("default", strict_run)] == ["paid"]
        assert [x.name for x in store.pending_signals("default", loose_run)] == ["payed"]
    finally:
        store.close()

