"""An unknown outcome stays unknown until the outside system or a person settles it.

Every user hook the runtime calls about an effect — ``reconcile`` after a lost answer,
``reconcile`` after a crash, ``compensate`` — is attacked in every way a hook fails: it
raises ``ToolCallError``, another exception or a ``BaseException``, answers nothing or
the wrong thing, or never answers. Each time the run escalates naming the hook, the effect
was performed exactly once (counted by the outside service), the step never saw a failure
it could retry under new keys, and a person's resolution then settles the call. A worker
SIGKILLed inside a reconcile hook leaves the call unknown: the next worker asks again and
never performs the effect a second time. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hook_world import (
    FAILURES,
    HOOK_TIMEOUT,
    HOOKS,
    KILLED_FLOW,
    Crash,
    failing,
    honest,
    killed_flow,
    seat_flow,
    transfer_flow,
)

import underway as uw
from fakes.outside_service import OutsideService
from fakes.processes import finish
from underway import events as ev
from underway.clock import ManualClock
from underway.engine import Engine
from underway.runner import Runner
from underway.store import connect

WORKER = Path(__file__).with_name("hook_world.py")
REASONS = {
    "tool_call_error": "raised ToolCallError: tool 'ledger' failed: LedgerDown",
    "exception": "raised RuntimeError: the ledger query broke",
    "base_exception": "raised Boom: the ledger query was aborted",
    "non_answer": "answered nothing (None)",
    "wrong_answer": "answered a",
    "hang": f"gave no answer within {HOOK_TIMEOUT:g}s",
}


def _drive(engine: Engine, rounds: int = 4) -> None:
    """Advance every run until nothing moves, letting durable timers and leases expire."""
    clock = engine.clock
    assert isinstance(clock, ManualClock)
    for _ in range(rounds):
        asyncio.run(Runner(engine).run_until_idle())
        clock.advance(3600)


def _events(engine: Engine, run_id: str) -> list[ev.RunEvent]:
    return [r.event for r in engine.journal.history("default", run_id)]


def _performed(svc: OutsideService, kind: str) -> int:
    return sum(d.performed for d in svc.ledger.snapshot().values() if d.kind == kind)


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("hook", HOOKS)
def test_a_hook_that_does_not_answer_escalates_and_the_effect_runs_once(
    db_url: str, hook: str, failure: str
) -> None:
    name = f"hooks-{hook}-{failure.replace('_', '-')}"
    if hook == "compensate":
        flow, kind, named = seat_flow(name, compensate=failing(failure, hook)), "release", \
            "compensate"
    else:
        flow, kind, named = transfer_flow(name, after=hook,
                                          reconcile=failing(failure, hook)), \
            "transfer", "reconcile"
    engine = Engine(connect(db_url), flows=[flow], clock=ManualClock(), lease_ttl=60)
    with OutsideService() as svc:
        run_id, _ = engine.start(name, {"service": svc.url})
        if hook == "crash":
            with pytest.raises(Crash):
                asyncio.run(Runner(engine).run_until_idle())
            assert engine.state(run_id).calls[0].status == "started"
        _drive(engine)
        s = engine.state(run_id)
        assert _performed(svc, kind) == 1, "the effect ran again after its hook failed"
        assert s.status == "escalated" and s.escalation is not None
        assert s.escalation.cause == "unknown_outcome"
        [esc] = [e for e in _events(engine, run_id) if isinstance(e, ev.Escalated)]
        assert esc.hook == named
        assert f"the {named} hook of tool " in esc.reason and REASONS[failure] in esc.reason
        # Never recorded as a failure (the charge before an undo fails, as it should).
        kinds = {type(e).__name__ for e in _events(engine, run_id)
                 if getattr(e, "tool", None) != "charge"}
        assert not kinds & {"ToolFailed", "RunFailed", "RunDeadLettered"}, kinds
        assert s.state["tries"] == 0, "the step was told the call failed"

        # A person confirms it happened: the step goes on with that result, once.
        engine.resolve(run_id, resolution="succeeded", result={"by": "ops"}, by="ops")
        _drive(engine)
        s = engine.state(run_id)
        assert s.status == "completed", s.status
        assert s.result == ({"rolled_back": {"by": "ops"}} if hook == "compensate"
                            else {"transferred": {"by": "ops"}})
        assert _performed(svc, kind) == 1
        assert len(svc.ledger.snapshot()) == (2 if hook == "compensate" else 1)


def test_a_hook_timeout_is_checked_when_the_tool_is_declared() -> None:
    with pytest.raises(uw.ConfigurationError, match="hook_timeout must be a positive"):
        @uw.tool(hook_timeout=0)
        async def nothing(args: Any) -> None: ...


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_a_plain_function_hook_that_raises_exit_escalates(
    db_url: str, raised: type[BaseException]
) -> None:
    """A reconcile hook on a thread of its own that raises SystemExit or KeyboardInterrupt
    did not stop the worker: it failed, and the run escalates naming it."""

    def exits(key: str) -> uw.Reconciled:
        raise raised("the ledger client gave up")

    name = f"hooks-plain-{raised.__name__.lower()}"
    flow = transfer_flow(name, after="loss", reconcile=exits)
    engine = Engine(connect(db_url), flows=[flow], clock=ManualClock(), lease_ttl=60)
    with OutsideService() as svc:
        run_id, _ = engine.start(name, {"service": svc.url})
        _drive(engine)
        s = engine.state(run_id)
        assert s.status == "escalated" and s.escalation is not None
        assert f"the reconcile hook of tool 'transfer' raised {raised.__name__}" \
            in s.escalation.reason
        assert _performed(svc, "transfer") == 1
        assert s.state["tries"] == 0


def test_a_plain_function_hook_is_bounded_too(db_url: str) -> None:
    """A reconcile hook that is not a coroutine function runs on a thread, bounded."""
    gate = threading.Event()

    def blocking(key: str) -> uw.Reconciled:
        gate.wait(30)
        return uw.Reconciled.happened({"late": True})

    flow = transfer_flow("hooks-plain", after="loss", reconcile=blocking)
    engine = Engine(connect(db_url), flows=[flow], clock=ManualClock(), lease_ttl=60)
    try:
        with OutsideService() as svc:
            run_id, _ = engine.start("hooks-plain", {"service": svc.url})
            _drive(engine, rounds=1)
            s = engine.state(run_id)
            assert s.status == "escalated" and s.escalation is not None
            assert "gave no answer within" in s.escalation.reason
            assert _performed(svc, "transfer") == 1
    finally:
        gate.set()


@pytest.mark.parametrize("after_restart", ["honest", "hangs"])
def test_a_worker_killed_inside_reconcile_leaves_the_outcome_unknown(
    db_url: str, tmp_path: Path, after_restart: str
) -> None:
    marker = tmp_path / "reconciling"
    with OutsideService() as svc:
        starter = Engine(connect(db_url), flows=[killed_flow(marker)])
        run_id, _ = starter.start(KILLED_FLOW, {"service": svc.url})
        proc = subprocess.Popen([sys.executable, str(WORKER), "--db", db_url,
                                 "--marker", str(marker)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not marker.exists():  # the worker is inside the reconcile hook
                assert proc.poll() is None, proc.communicate()[1].decode(errors="replace")
                assert time.monotonic() < deadline, "the worker never asked reconcile"
                time.sleep(0.05)
        finally:
            proc.kill()
        assert finish(proc)
        assert marker.read_text().startswith(run_id)
        assert _performed(svc, "transfer") == 1
        assert starter.state(run_id).calls[0].status == "started"

        # The next worker (past the dead one's lease) finds the intent without an outcome.
        reconcile = honest(svc.url) if after_restart == "honest" else failing("hang", "loss")
        engine = Engine(connect(db_url), flows=[killed_flow(None, reconcile, HOOK_TIMEOUT)],
                        clock=ManualClock(time.time() + 3600), lease_ttl=60)
        _drive(engine, rounds=2)
        s = engine.state(run_id)
        assert _performed(svc, "transfer") == 1, "the effect ran again after the kill"
        if after_restart == "honest":
            assert s.status == "completed"
            key = marker.read_text()
            assert s.result == {"transferred": {"id": "transfer-1", "key": key}}
        else:
            assert s.status == "escalated" and s.escalation is not None
            assert "the reconcile hook of tool 'transfer' gave no answer" in s.escalation.reason
            engine.resolve(run_id, resolution="failed", by="ops")
            _drive(engine, rounds=1)
            s = engine.state(run_id)
            # A person says it never happened: the step may now try again, under a new key.
            assert s.status == "escalated"
            assert _performed(svc, "transfer") == 2
            assert len(svc.ledger.snapshot()) == 2
