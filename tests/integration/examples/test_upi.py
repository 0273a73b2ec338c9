"""The UPI example on SQLite and PostgreSQL: every terminal state on UPI's own timings (a
clock that jumps to each durable timer), a collect whose outcome is unknown reconciled by
its transaction reference and never sent twice, and real worker processes killed with
SIGKILL after the PSP accepted the collect and while the run slept between status checks.
Every check reads the journal and the simulated PSP's own log of requests."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.upi_reconciliation import demo as upi_demo  # noqa: E402
from examples.upi_reconciliation.flow import (  # noqa: E402
    OPS,
    make_tools,
    txn_ref_of,
    upi_payment,
)
from examples.upi_reconciliation.psp import (  # noqa: E402
    Psp,
    Script,
    StaleFence,
    replies,
)

from underway import Engine, connect  # noqa: E402
from underway import events as ev  # noqa: E402
from underway.clock import ManualClock  # noqa: E402
from underway.guard.approvals import (  # noqa: E402
    generate_keypair,
    load_private_key,
    register_approver,
    write_private_key,
)

DEMO = ROOT / "examples" / "upi_reconciliation" / "demo.py"
MIN = 60.0


@dataclass
class Paid:
    """How one payment went."""

    status: str
    result: dict[str, Any]
    history: list[Any]
    collects: list[dict[str, Any]]
    checks_at: list[float]
    """Seconds after the collect at which the PSP was asked for the status."""


def pay(db: str, tmp_path: Path, script: Script, *,
        ops_answer: dict[str, Any] | None = None) -> Paid:
    """One payment, driven to its end on a clock that jumps to each timer; payments ops
    answers ``ops_answer`` if the run asks."""
    clock = ManualClock(1_719_800_000.0)
    psp = Psp(tmp_path / "psp.db", clock=clock.now)
    psp.script("payer@okhdfc", script)
    store = connect(db)
    try:
        engine = Engine(store, flows=[upi_payment], tools=make_tools(psp), clock=clock)
        run_id, _ = engine.start(upi_payment, {"order_id": "ORD-1", "payer_vpa": "payer@okhdfc",
                                               "amount": "1250.00"})
        state = asyncio.run(upi_demo.drive(engine, clock, run_id))
        if ops_answer is not None:
            assert state.status == "escalated"
            pem, public = generate_keypair()
            write_private_key(tmp_path / "ops.pem", pem)
            register_approver(store, upi_demo.OPS_ID, public_key=public, roles=[OPS],
                              now=clock.now())
            upi_demo.answer_ops(engine.client, run_id, load_private_key(tmp_path / "ops.pem"),
                                ops_answer, clock.now())
            state = asyncio.run(upi_demo.drive(engine, clock, run_id))
        history = [r.event for r in engine.client.history(run_id)]
    finally:
        store.close()
    collects = psp.requests("collect")
    t0 = collects[0]["at"] if collects else 0.0
    checks = [r["at"] - t0 for r in psp.requests("status")]
    return Paid(state.status, state.result or {}, history, collects, checks)


TERMINAL = [
    ("success", replies("PENDING", "SUCCESS"), ("SUCCESS", "00"), [90, 450]),
    ("declined", replies("PENDING", "FAILURE/ZA"), ("FAILURE", "ZA"), [90, 450]),
    ("debit failed", replies("FAILURE/U30"), ("FAILURE", "U30"), [90]),
    # Still PENDING at the check just after the 30-minute expiry: UPI expired it.
    ("expired", replies("PENDING"), ("FAILURE", "U69"), [90, 450, 1860]),
    ("deemed, then confirmed", replies("PENDING", "DEEMED/DEEMED", "SUCCESS"),
     ("SUCCESS", "00"), [90, 450, 450 + 240 * MIN]),
    ("deemed, then reversed", replies("DEEMED/DEEMED", "DEEMED/DEEMED", "FAILURE/REVERSED"),
     ("FAILURE", "REVERSED"), [90, 90 + 240 * MIN, 90 + 480 * MIN]),
]


@pytest.mark.parametrize(("name", "script", "ends", "checks_at"), TERMINAL,
                         ids=[t[0] for t in TERMINAL])
def test_each_terminal_state_on_upis_timings(
    db: str, tmp_path: Path, name: str, script: Any, ends: tuple[str, str],
    checks_at: list[float],
) -> None:
    paid = pay(db, tmp_path, Script(replies=script))
    assert paid.status == "completed"
    assert (paid.result["status"], paid.result["code"]) == ends
    assert paid.result["deemed"] == ("deemed" in name)
    assert paid.checks_at == checks_at
    assert [c["outcome"] for c in paid.collects] == ["accepted"]
    assert paid.result["txn_ref"] == paid.collects[0]["txn_ref"]
    # Every wait between checks was a durable timer: the run held no worker.
    assert sum(isinstance(e, ev.TimerSet) for e in paid.history) == len(checks_at)


def test_deemed_never_confirmed_goes_to_a_person_after_a_day(db: str, tmp_path: Path) -> None:
    paid = pay(db, tmp_path, Script(replies=replies("DEEMED/DEEMED")),
               ops_answer={"status": "SUCCESS", "rrn": "400000000077", "note": "T+1 file"})
    assert paid.status == "completed"
    assert paid.result | {"txn_ref": None} == {
        "status": "SUCCESS", "code": "", "reason": "T+1 file", "rrn": "400000000077",
        "checks": 7, "deemed": True, "settled_by": "payments_ops", "txn_ref": None}
    assert paid.checks_at == [90 + 240 * MIN * n for n in range(7)]  # a day, every 4 hours
    [asked] = [e for e in paid.history if isinstance(e, ev.Escalated)]
    assert asked.required_role == OPS and "still DEEMED" in str(asked.question)
    assert isinstance(asked.context, dict) and len(asked.context["checks"]) == 7
    [answered] = [e for e in paid.history if isinstance(e, ev.EscalationAnswered)]
    assert answered.decision["approver_id"] == upi_demo.OPS_ID


def test_pending_past_the_expiry_goes_to_a_person(db: str, tmp_path: Path) -> None:
    paid = pay(db, tmp_path, Script(replies=replies("PENDING"), expires=False),
               ops_answer={"status": "FAILURE", "note": "expired unpaid"})
    assert (paid.status, paid.result["status"], paid.result["settled_by"]) == (
        "completed", "FAILURE", "payments_ops")
    assert paid.checks_at == [90, 450, 1860]
    assert len(paid.collects) == 1


def test_a_collect_lost_after_the_psp_accepted_it_is_reconciled_not_resent(
    db: str, tmp_path: Path,
) -> None:
    paid = pay(db, tmp_path, Script(replies=replies("PENDING", "SUCCESS"),
                                    collect_fault="lost_response"))
    assert paid.result["status"] == "SUCCESS"
    assert [c["outcome"] for c in paid.collects] == ["accepted"]  # exactly one request
    started = [e for e in paid.history if isinstance(e, ev.ToolStarted)
               and e.tool == "upi_collect"]
    unknown = [e for e in paid.history if isinstance(e, ev.ToolOutcomeUnknown)]
    settled = [e for e in paid.history if isinstance(e, ev.ToolSucceeded)
               and e.tool == "upi_collect"]
    assert len(started) == len(unknown) == len(settled) == 1
    assert settled[0].reconciled and settled[0].key == started[0].key
    # Reconciled by the transaction reference the call's key names, before anything else.
    assert settled[0].result["txn_ref"] == txn_ref_of(started[0].key) == paid.result["txn_ref"]


def test_a_collect_lost_before_the_psp_is_sent_again_with_the_same_reference(
    db: str, tmp_path: Path,
) -> None:
    paid = pay(db, tmp_path, Script(replies=replies("SUCCESS"),
                                    collect_fault="timeout_unseen"))
    assert paid.result["status"] == "SUCCESS"
    assert [c["outcome"] for c in paid.collects] == ["accepted"]  # one reached the PSP
    kinds = [type(e).__name__ for e in paid.history
             if getattr(e, "tool", None) == "upi_collect"]
    assert kinds == ["ToolStarted", "ToolOutcomeUnknown", "ToolReconciled", "RetryScheduled",
                     "ToolStarted", "ToolSucceeded"]
    keys = {e.key for e in paid.history if isinstance(e, ev.ToolStarted)
            and e.tool == "upi_collect"}
    assert len(keys) == 1 and paid.collects[0]["txn_ref"] == txn_ref_of(keys.pop())


def test_a_failed_status_check_waits_for_the_next_one(db: str, tmp_path: Path) -> None:
    paid = pay(db, tmp_path, Script(replies=replies("PENDING", "SUCCESS"),
                                    failing_checks=(2,)))
    assert paid.result["status"] == "SUCCESS" and paid.result["checks"] == 3
    assert paid.checks_at == [90, 450, 1860]


def test_the_psp_refuses_a_collect_older_than_a_reconcile_query(tmp_path: Path) -> None:
    psp = Psp(tmp_path / "psp.db")
    assert psp.lookup("UWREF1", fence=10) is None
    with pytest.raises(StaleFence):
        psp.collect("UWREF1", "payer@okhdfc", 100, "late", 30, fence=9)
    assert psp.collect("UWREF1", "payer@okhdfc", 100, "in order", 30, fence=11)["status"] \
        == "PENDING"
    assert [r["outcome"] for r in psp.requests("collect")] == ["stale_fence", "accepted"]


@pytest.mark.crash
def test_killed_workers_never_send_a_collect_twice(db: str, tmp_path: Path) -> None:
    """Worker 1 dies right after the PSP accepted the collect; worker 2 reconciles it by
    reference, checks once and dies while the run sleeps on its timer; worker 3 ends it."""
    assert upi_demo.crashes(tmp_path, db) == []
    psp = Psp(tmp_path / "psp.db")
    assert [r["outcome"] for r in psp.requests("collect")] == ["accepted"]
    assert [r["outcome"] for r in psp.requests("lookup")] == ["found"]
    assert [r["outcome"] for r in psp.requests("status")] == ["PENDING", "SUCCESS"]
    status = psp.requests("status")
    assert status[1]["at"] - status[0]["at"] >= 6 * 0.2  # the second check kept its timer


@pytest.mark.crash
def test_the_demo_says_ok(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(DEMO), "--data", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "OK: every payment ended as scripted" in done.stdout
    # Ten scenarios and the payment through killed workers: one collect request each.
    assert done.stdout.count("received 1 collect request") == 11
    assert "worker 1 killed (SIGKILL) after the PSP accepted collect" in done.stdout
