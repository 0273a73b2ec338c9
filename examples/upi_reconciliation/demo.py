"""UPI collect requests followed to a settled status, through every state and fault.

1. Ten payments on a clock that skips ahead to each durable timer, so UPI's real timings
   show (the first status check at +01:30, the collect expiring at +30:00, a deemed credit
   checked every four hours): success; declined; expired; deemed, then confirmed; deemed, then
   reversed; deemed and never confirmed (a person settles it); still pending after the
   expiry (a person settles it); the collect's answer lost after the PSP accepted it, and
   lost before it arrived (each reconciled by reference, never sent blindly); a status check
   failing on the wire.
2. Real worker processes on a real clock (a minute lasts 0.2 s): the first is killed with
   SIGKILL right after the PSP accepted the collect, before the journal recorded it; the
   second while the run sleeps between status checks; the third finishes the payment.

Every check reads the journal and the PSP's own log of requests: the demo exits non-zero if
a collect request reached the PSP twice, or a payment did not end as scripted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.upi_reconciliation.flow import OPS, UpiTimers, make_tools, upi_payment
from examples.upi_reconciliation.psp import Psp, Script, replies

from underway import Client, Engine, ManualClock, Runner, RunState, connect
from underway import events as ev
from underway.client import Recorded
from underway.guard.approvals import (
    generate_keypair,
    load_private_key,
    register_approver,
    sign_decision,
    write_private_key,
)

SCENARIOS: list[tuple[str, str, Script, dict[str, Any] | None]] = [
    # (name, payer VPA, what the PSP does, what payments ops answers if asked)
    ("success", "asha.k@okhdfc", Script(replies=replies("PENDING", "SUCCESS")), None),
    ("declined by the payer", "ravi.m@okicici",
     Script(replies=replies("PENDING", "FAILURE/ZA")), None),
    ("collect expired", "meena.s@oksbi", Script(replies=replies("PENDING")), None),
    ("deemed, then confirmed", "farhan@ybl",
     Script(replies=replies("PENDING", "DEEMED/DEEMED", "DEEMED/DEEMED", "SUCCESS")), None),
    ("deemed, then reversed", "lakshmi.v@okaxis",
     Script(replies=replies("DEEMED/DEEMED", "FAILURE/REVERSED")), None),
    ("deemed, never confirmed", "gurpreet@paytm",
     Script(replies=replies("DEEMED/DEEMED")),
     {"status": "SUCCESS", "rrn": "400000000077", "note": "credited per the bank's T+1 file"}),
    ("pending after expiry", "joseph.t@okhdfc",
     Script(replies=replies("PENDING"), expires=False),
     {"status": "FAILURE", "note": "the switch shows the collect expired unpaid"}),
    ("collect answer lost, PSP had it", "anil.d@okicici",
     Script(replies=replies("PENDING", "SUCCESS"), collect_fault="lost_response"), None),
    ("collect lost before the PSP", "sunita.r@oksbi",
     Script(replies=replies("SUCCESS"), collect_fault="timeout_unseen"), None),
    ("a status check fails", "kiran.p@ybl",
     Script(replies=replies("PENDING", "SUCCESS"), failing_checks=(2,)), None),
]
EXPECTED = {
    "success": "SUCCESS", "declined by the payer": "FAILURE ZA",
    "collect expired": "FAILURE U69", "deemed, then confirmed": "SUCCESS 00",
    "deemed, then reversed": "FAILURE REVERSED", "deemed, never confirmed": "SUCCESS",
    "pending after expiry": "FAILURE", "collect answer lost, PSP had it": "SUCCESS",
    "collect lost before the PSP": "SUCCESS", "a status check fails": "SUCCESS",
}
OPS_ID = "devika"
CRASH_VPA = "nisha.b@okaxis"


def say(text: str = "") -> None:
    """Print at once (the output interleaves with child processes)."""
    print(text, flush=True)


def clock_text(seconds: float) -> str:
    """``+mm:ss`` (or ``+h:mm:ss``) after the request."""
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    return f"+{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"+{rest // 60:02d}:{rest % 60:02d}"


def timeline(history: list[Recorded]) -> list[str]:
    """What happened to a payment, one line per event that matters, timed from the start;
    a run of identical status checks is told once, with how many followed."""
    t0 = history[0].at
    said: list[tuple[str, str]] = []
    lost = False
    for r in history:
        e, at = r.event, clock_text(r.at - t0)
        if isinstance(e, ev.ToolStarted) and e.tool == "upi_collect":
            said.append((at, "collect request sent"))
        elif isinstance(e, ev.ToolOutcomeUnknown):
            lost = True
            said.append((at, f"its answer is lost ({e.error_type}): outcome unknown"))
        elif isinstance(e, ev.ToolSucceeded) and e.tool == "upi_collect":
            why = "" if lost or not e.reconciled else (
                "the journal holds its intent and no outcome (the worker died): ")
            how = (f"{why}reconciled by reference: the PSP has it, so it is not sent again"
                   if e.reconciled else "accepted")
            said.append((at, f"{how}: {e.result['txn_ref']} PENDING"))
        elif isinstance(e, ev.ToolReconciled):
            said.append((at, "reconciled by reference: the PSP never saw it"))
        elif isinstance(e, ev.RetryScheduled):
            said.append((at, f"sent again in {e.delay_s:.0f}s on a durable timer, same "
                             "reference"))
        elif isinstance(e, ev.ToolSucceeded) and e.tool == "upi_status":
            res = e.result
            code = f" {res['code']}" if res["code"] not in ("", res["status"]) else ""
            reason = f" ({res['reason']})" if res["reason"] else ""
            said.append((at, f"status {res['status']}{code}{reason}"))
        elif isinstance(e, ev.ToolFailed) and e.tool == "upi_status":
            said.append((at, f"status check failed ({e.error_type}); the next one on "
                             "schedule"))
        elif isinstance(e, ev.Escalated) and e.cause == "question":
            said.append((at, f"asked {e.required_role} to settle it"))
        elif isinstance(e, ev.EscalationAnswered):
            answer = e.decision["answer"]
            said.append((at, f"settled by {e.decision['approver_id']}: {answer['status']} "
                             f"({answer['note']})"))
    lines: list[str] = []
    n = 0
    while n < len(said):
        at, text = said[n]
        same = n + 1
        while same < len(said) and said[same][1] == text and text.startswith("status "):
            same += 1
        lines.append(f"{at:>9}  {text}")
        if same - n > 2:
            more = same - n - 2
            lines.append(f"{'':>9}  ... {more} more check{'s' * (more > 1)}, the same ...")
        if same - n > 1:
            lines.append(f"{said[same - 1][0]:>9}  {text}")
        n = same
    return lines


def answer_ops(client: Client, run_id: str, key: Any, reply: dict[str, Any],
               now: float) -> None:
    """Sign ``reply`` as the operator at time ``now`` and send it to the question the run
    waits on."""
    pending = client.pending_request(run_id)
    if pending is None or pending.kind != "question":
        raise RuntimeError(f"run {run_id} asks nothing")
    signed = sign_decision(
        key, request_id=pending.request_id, run_id=run_id, tenant_id="default",
        tool=pending.tool, args_hash=pending.args_hash, decision="answer",
        expires_at=min(pending.expires_at, now + 3600), approver_id=OPS_ID, answer=reply,
    )
    client.submit_decision(signed.model_dump(mode="json"))


async def drive(engine: Engine, clock: ManualClock, run_id: str) -> RunState:
    """Advance the run until it ends or waits for a person, moving ``clock`` straight to
    each durable timer as it comes due."""
    runner = Runner(engine)
    while True:
        await runner.run_until_idle()
        state = engine.state(run_id)
        wake = engine.store.next_wake_at()
        if state.status in ("completed", "failed", "cancelled", "dead", "escalated") \
                or wake is None:
            return state
        clock.advance(max(0.0, wake - clock.now()))


def scenarios(data: Path) -> list[str]:
    """Part 1: every scenario on a time-skipping clock; the failures found."""
    clock = ManualClock(1_719_800_000.0)  # 1 July 2024, 07:43 IST
    psp = Psp(data / "scenarios-psp.db", clock=clock.now)
    store = connect(f"sqlite:///{data / 'scenarios.db'}")
    failures: list[str] = []
    try:
        engine = Engine(store, flows=[upi_payment], tools=make_tools(psp), clock=clock)
        pem, public = generate_keypair()
        write_private_key(data / f"{OPS_ID}.pem", pem)
        key = load_private_key(data / f"{OPS_ID}.pem")
        register_approver(store, OPS_ID, public_key=public, roles=[OPS], now=clock.now())
        for n, (name, vpa, script, ops_answer) in enumerate(SCENARIOS, start=1):
            psp.script(vpa, script)
            amount = Decimal(499 + 250 * n).quantize(Decimal("0.01"))
            run_id, _ = engine.start(upi_payment, {
                "order_id": f"ORD-{7000 + n}", "payer_vpa": vpa, "amount": str(amount)})
            state = asyncio.run(drive(engine, clock, run_id))
            if state.status == "escalated" and ops_answer is not None:
                answer_ops(engine.client, run_id, key, ops_answer, clock.now())
                state = asyncio.run(drive(engine, clock, run_id))
            result = state.result or {}
            say(f"\n[1.{n}] {name}: {amount:,} INR from {vpa}")
            for line in timeline(engine.client.history(run_id)):
                say(f"      {line}")
            ref = result.get("txn_ref")
            collects = [r for r in psp.requests("collect") if r["txn_ref"] == ref]
            got = f"{result.get('status')} {result.get('code') or ''}".strip()
            say(f"      -> {got} after {result.get('checks')} status checks; the PSP "
                f"received {len(collects)} collect request for {ref}")
            if state.status != "completed" or not got.startswith(EXPECTED[name]):
                failures.append(f"{name}: ended {state.status} {got}, not {EXPECTED[name]}")
            if len(collects) != 1:
                failures.append(f"{name}: the PSP received {len(collects)} collect requests")
    finally:
        store.close()
    return failures


# -- part 2: real processes -----------------------------------------------------------------


def work(data: Path, db: str, run_id: str, minute: float) -> int:
    """A worker process: start the payment (or find it) and drive it to its end."""
    store = connect(db)
    try:
        engine = Engine(store, flows=[upi_payment], tools=make_tools(Psp(data / "psp.db")))
        engine.start(upi_payment, {
            "order_id": "ORD-9001", "payer_vpa": CRASH_VPA, "amount": "2499.00",
            "timers": UpiTimers(minute=minute).model_dump()}, run_id=run_id,
            idempotency_key="ORD-9001")
        state = asyncio.run(Runner(engine, poll=0.05).run_until_complete(run_id))
        return 0 if state.status == "completed" else 1
    finally:
        store.close()


def spawn(data: Path, db: str, run_id: str, minute: float,
          crash_after_effect: int | None = None) -> subprocess.Popen[bytes]:
    """Start a worker process (optionally armed to SIGKILL itself after an effect)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after_effect is not None:
        env |= {"UNDERWAY_CRASH_AFTER": str(crash_after_effect),
                "UNDERWAY_CRASH_POINTS": "effect.after_run"}
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "work", "--data", str(data),
         "--db", db, "--run-id", run_id, "--minute", str(minute)], env=env)


def wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.02)


def crashes(data: Path, db: str, minute: float = 0.2) -> list[str]:
    """Part 2: a payment through two SIGKILLed workers; the failures found."""
    psp = Psp(data / "psp.db")
    psp.script(CRASH_VPA, Script(replies=replies("PENDING", "SUCCESS")))
    run_id = f"upi-crash-{os.getpid()}"
    failures: list[str] = []
    say(f"\n[2] a 2,499.00 INR collect from {CRASH_VPA} through killed workers "
        f"(a minute lasts {minute}s)")
    first = spawn(data, db, run_id, minute, crash_after_effect=1)
    if first.wait(timeout=120) != -signal.SIGKILL:
        return ["worker 1 did not die by SIGKILL after the collect"]
    accepted = psp.requests("collect")
    say(f"    worker 1 killed (SIGKILL) after the PSP accepted collect {accepted[0]['txn_ref']},"
        " before the journal recorded it")
    second = spawn(data, db, run_id, minute)
    with Client.connect(db, migrate=False) as client:

        def sleeping_after_a_check() -> bool:
            row = client.get_run(run_id)
            return row is not None and row.status == "waiting" and any(
                isinstance(r.event, ev.ToolSucceeded) and r.event.tool == "upi_status"
                for r in client.history(run_id))

        wait_for(sleeping_after_a_check, "the run to sleep after its first status check")
        second.send_signal(signal.SIGKILL)
        second.wait(timeout=60)
        row = client.get_run(run_id)
    due = "" if row.next_wake_at is None else f", due in {row.next_wake_at - time.time():.1f}s"
    say(f"    worker 2 reconciled it by reference ({len(psp.requests('lookup'))} lookup, the "
        f"PSP had it), checked the status once, and was killed (SIGKILL) while the run "
        f"waited ({row.status}) on a durable timer{due}")
    third = spawn(data, db, run_id, minute)
    if third.wait(timeout=120) != 0:
        failures.append("worker 3 did not complete the payment")
    with Client.connect(db, migrate=False) as client:
        state = client.state(run_id)
        audit = client.verify(run_id)
        for line in timeline(client.history(run_id)):
            say(f"      {line}")
    collects = psp.requests("collect")
    say(f"    worker 3 finished: {(state.result or {}).get('status')}; the PSP received "
        f"{len(collects)} collect request; hash chain of {audit.events} events "
        f"{'intact' if audit.ok else 'BROKEN'}")
    if len(collects) != 1:
        failures.append(f"the PSP received {len(collects)} collect requests")
    if state.status != "completed" or (state.result or {}).get("status") != "SUCCESS":
        failures.append(f"the crashed payment ended {state.status}")
    if not audit.ok:
        failures.append("the audit failed")
    return failures


def demo(data: Path, db: str | None) -> int:
    """Run both parts; return the exit status."""
    say("UPI collect requests, followed to a settled status on durable timers")
    say(f"data in {data}")
    say("\n[1] every state and fault, on a clock that skips to each timer")
    failures = scenarios(data)
    failures += crashes(data, db or f"sqlite:///{data / 'crash.db'}")
    say()
    for failure in failures:
        say(f"FAIL: {failure}")
    if not failures:
        say("OK: every payment ended as scripted; no collect request reached the PSP twice")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """``demo.py [--data DIR] [--db URL]`` runs the demo; ``demo.py work ...`` is a worker."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", choices=["demo", "work"], default="demo")
    parser.add_argument("--data", type=Path, help="an empty directory (default: a new one)")
    parser.add_argument("--db", help="the journal of part 2 (default: SQLite in --data)")
    parser.add_argument("--run-id", help="(worker) the run to start or resume")
    parser.add_argument("--minute", type=float, default=0.2,
                        help="(worker) seconds a minute lasts")
    args = parser.parse_args(argv)
    if args.mode == "work":
        if args.data is None or args.run_id is None or args.db is None:
            parser.error("work needs --data, --db and --run-id")
        return work(args.data, args.db, args.run_id, args.minute)
    data = args.data or Path(tempfile.mkdtemp(prefix="underway-upi-"))
    data.mkdir(parents=True, exist_ok=True)
    if any(data.iterdir()):
        parser.error(f"{data} is not empty; pass an empty --data directory")
    return demo(data, args.db)


if __name__ == "__main__":
    sys.exit(main())
