"""The support-ticket monitor example end to end, on SQLite and on PostgreSQL: the desk,
real worker processes (the first killed with SIGKILL while the desk held a reply it had
already taken), intake, signed approvals and the SLA sweep. Every check reads the desk's
own records or the journal, not the example's printout alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.support import helpcenter  # noqa: E402
from examples.support.app import Settings, build  # noqa: E402
from examples.support.desk import Desk, DeskServer  # noqa: E402
from examples.support.relay import forward  # noqa: E402

from underway import Runner, connect  # noqa: E402
from underway import events as ev  # noqa: E402
from underway.guard.approvals import (  # noqa: E402
    generate_keypair,
    load_private_key,
    register_approver,
    sign_decision,
    write_private_key,
)
from underway.journal import Journal  # noqa: E402
from underway.journal.state import Recorded  # noqa: E402

RUN = ROOT / "examples" / "support" / "run.py"


def journals(db: str) -> dict[str, tuple[str, str, list[Recorded], bool]]:
    """Ticket (or ``sweep``, the sweep run at deployment) -> (run id, status, history,
    chain verifies)."""
    store = connect(db)
    try:
        journal = Journal(store)
        found: dict[str, tuple[str, str, list[Recorded], bool]] = {}
        for row in store.list_runs("default", limit=100):
            if row.flow == "support_sla_sweep" and row.idempotency_key != "sla-sweep:deployment":
                continue  # the five-minute schedule's tick, when the test spans one
            state = journal.load("default", row.run_id)
            name = ("sweep" if row.flow == "support_sla_sweep"
                    else state.input["context"]["ticket_id"])
            assert name not in found, f"{name} has two runs"
            found[name] = (row.run_id, state.status, journal.history("default", row.run_id),
                           journal.verify("default", row.run_id).ok)
        return found
    finally:
        store.close()


def of(history: list[Recorded], kind: type[ev.Event]) -> list[Any]:
    return [r.event for r in history if isinstance(r.event, kind)]


@pytest.mark.crash
def test_a_day_at_the_help_desk_survives_a_killed_worker(tmp_path: Path, db: str) -> None:
    data = tmp_path / "day"
    done = subprocess.run([sys.executable, str(RUN), "--data", str(data), "--db", db],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "worker 1 killed (SIGKILL, exit -9)" in done.stdout
    assert "OK: 5 tickets each handled once" in done.stdout
    desk = json.loads((data / "desk.json").read_text())
    tickets = desk["tickets"]
    runs = journals(db)

    # Each new ticket was handled by exactly one agent run, which completed; the backlog
    # tickets got none (they predate the monitor) and every journal verifies.
    assert sorted(runs) == ["T-101", "T-102", "T-103", "T-104", "T-105", "sweep"]
    assert {status for _, status, _, _ in runs.values()} == {"completed"}
    assert all(ok for _, _, _, ok in runs.values())

    # No reply was sent twice: one delivery per idempotency key, one reply per ticket.
    # The reply the desk took as worker 1 died was asked for again by worker 2, with the
    # same key, and answered from the desk's record instead of being sent again.
    outbox = desk["outbox"]
    assert set(Counter(m["key"] for m in outbox).values()) == {1}
    assert Counter(m["ticket_id"] for m in outbox) == {"T-101": 1, "T-102": 1, "T-104": 1}
    # (Another reply in flight in the same worker at that moment may have been asked for
    # twice as well; each is still delivered once.)
    retried = [m for m in outbox if desk["attempts"][m["key"]] > 1]
    assert retried
    for message in retried:
        run_id, _, history, _ = runs[message["ticket_id"]]
        assert message["key"].startswith(run_id)
        assert [e.key for e in of(history, ev.ToolSucceeded) if e.tool == "send_reply"] == [
            message["key"]]
        assert any(e.attempt > 1 for e in of(history, ev.StepStarted))

    # The injection: the close was refused by the policy, the refund tool does not exist,
    # the dictated reply was held for a support lead, who rejected it; nothing was closed
    # or sent, and the ticket went to a person.
    _, _, injected, _ = runs["T-103"]
    assert [(e.tool, e.cause) for e in of(injected, ev.ToolRefused)] == [
        ("close_ticket", "policy_denied")]
    assert "issue_refund" in [e.tool for e in of(injected, ev.ToolSelected)]
    held = of(injected, ev.ApprovalRequested)
    assert [(e.tool, e.rule_id) for e in held] == [("send_reply", "untrusted-reply-needs-lead")]
    assert held[0].args["body"] == "Refund of $500 approved for order B-7781."
    assert [e.approver_id for e in of(injected, ev.ApprovalRejected)] == ["lena"]
    assert not [t for t in tickets.values() if t["status"] in ("closed", "resolved")]
    assert tickets["T-103"]["status"] == "escalated"
    assert not [m for m in tickets["T-103"]["messages"] if m["from"] == "agent"]

    # In prod a high-priority reply waited for the lead's signed approval.
    _, _, urgent, _ = runs["T-102"]
    assert [e.rule_id for e in of(urgent, ev.ApprovalRequested)] == [
        "high-priority-reply-needs-lead"]
    assert [e.approver_id for e in of(urgent, ev.ApprovalGranted)] == ["lena"]

    # Missing order number: the agent asked, waited, and resumed on the customer's answer.
    _, _, asked, _ = runs["T-104"]
    kinds = [type(r.event).__name__ for r in asked]
    assert kinds.index("SignalAwaited") < kinds.index("SignalReceived")
    assert [e.signal for e in of(asked, ev.SignalReceived)] == ["customer_replied"]
    said = [(m["from"], m.get("kind")) for m in tickets["T-104"]["messages"]]
    assert said == [("agent", "details_request"), ("customer", None), ("agent", "reply")]
    assert "C-3317" in tickets["T-104"]["messages"][-1]["body"]
    # ... and when the customer stays silent, the wait times out and a person takes over.
    _, _, silent, _ = runs["T-105"]
    assert of(silent, ev.SignalAwaited) and not of(silent, ev.SignalReceived)
    assert tickets["T-105"]["status"] == "escalated"
    assert "did not answer" in tickets["T-105"]["escalation"]["reason"]

    # The sweep escalated the breached backlog ticket, and the one about to breach.
    _, _, sweep, _ = runs["sweep"]
    assert of(sweep, ev.RunCompleted)[0].result["breached"] == ["T-100"]
    assert tickets["T-100"]["escalation"]["reason"].startswith("SLA breached")
    assert tickets["T-099"]["escalation"]["reason"].startswith("SLA at risk")


def test_the_example_refuses_a_data_directory_in_use(tmp_path: Path) -> None:
    (tmp_path / "desk.json").write_text("{}")
    done = subprocess.run([sys.executable, str(RUN), "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "is not empty" in done.stderr


def test_outside_prod_a_high_priority_reply_waits_only_for_the_untrusted_input_rule(
    tmp_path: Path,
) -> None:
    desk = Desk.create(tmp_path)
    store = connect("memory://")
    with DeskServer(desk) as server:
        monitor = build(Settings(desk=server.url, environment="dev"), store)
        engine = monitor.engine(store)
        helpcenter.seed(monitor.knowledge, now=engine.clock.now())
        pem, public = generate_keypair()
        write_private_key(tmp_path / "lead.pem", pem)
        register_approver(engine.store, "lead", public_key=public, roles=["support_lead"],
                          now=engine.clock.now())
        ticket = desk.open_ticket("Tomás Ruiz", "Account locked", "My card payment failed "
                                  "twice and now I cannot log in.", "high", 3600)
        [started] = forward(engine, server.url, monitor.routes)
        assert started.result.action == "started" and started.result.run_id
        run_id = started.result.run_id
        asyncio.run(Runner(engine).run_until_idle())

        # The model read what the customer wrote, so its reply waits for a lead; the
        # high-priority rule applies in prod only and is not what holds it.
        state = engine.state(run_id)
        history = engine.journal.history("default", run_id)
        assert [(e.tool, e.rule_id) for e in of(history, ev.ApprovalRequested)] == [
            ("send_reply", "untrusted-reply-needs-lead")]
        assert desk.snapshot()["outbox"] == []
        pending = state.pending_approval
        assert pending is not None
        decision = sign_decision(
            load_private_key(tmp_path / "lead.pem"), request_id=str(pending.request_id),
            run_id=run_id, tenant_id="default", tool="send_reply",
            args_hash=str(pending.args_hash), decision="approve",
            expires_at=float(str(pending.expires_at)), approver_id="lead",
        )
        engine.submit_decision(decision.model_dump(mode="json"))
        asyncio.run(Runner(engine).run_until_idle())
        assert engine.state(run_id).status == "completed"
        assert [m["ticket_id"] for m in desk.snapshot()["outbox"]] == [ticket["id"]]
        # The run is done with the ticket: a later message from the customer finds no
        # owner to signal, and starts nothing.
        desk.customer_reply(ticket["id"], "Thanks, that worked!")
        [thanks] = forward(engine, server.url, monitor.routes, after=started.seq)
        assert (thanks.result.action, thanks.result.run_id) == ("ignored", None)


def test_the_desk_pause_names_the_reply_it_holds_while_others_pass(tmp_path: Path) -> None:
    """The kill in the scenario is aimed by what the pause holds: with two replies taken
    at once, the held one is the one whose caller has not heard back, never another."""
    desk = Desk.create(tmp_path)
    first = desk.open_ticket("A", "one", "first", "normal", 3600)
    second = desk.open_ticket("B", "two", "second", "normal", 3600)
    pause = desk.pause_next("reply")
    answered: list[dict[str, Any]] = []
    caller = threading.Thread(target=lambda: answered.append(
        desk.reply("key-1", first["id"], "hello", "normal")))
    caller.start()
    assert pause.arrived.wait(timeout=60)
    # The held caller has not heard back; a second reply passes while it waits.
    assert desk.reply("key-2", second["id"], "hi", "normal")["status"] == "answered"
    assert answered == []
    assert pause.held is not None
    assert (pause.held["key"], pause.held["ticket_id"]) == ("key-1", first["id"])
    assert [m["key"] for m in desk.snapshot()["outbox"]] == ["key-1", "key-2"]
    pause.release()
    caller.join(timeout=60)
    assert [a["message_id"] for a in answered] == [pause.held["message_id"]]
    # A retry of the held reply is answered from what was saved, and holds nothing.
    assert desk.reply("key-1", first["id"], "hello", "normal") == answered[0]
    assert len(desk.snapshot()["outbox"]) == 2
