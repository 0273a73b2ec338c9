"""`make demo`: the invoice follow-up agent survives a SIGKILL without re-sending e-mail.

1. A worker process starts the run and is killed with SIGKILL right after the e-mail
   gateway accepted a reminder and before the journal recorded that it did
   (``UNDERWAY_CRASH_AFTER`` at the ``effect.after_run`` fault point).
2. A fresh worker process resumes the run. The reminder's intent is journaled without an
   outcome, so instead of sending it again the engine asks the outbox (the tool's
   ``reconcile`` hook) whether that idempotency key went out.
3. The demo prints the run's timeline, verifies the journal's hash chain, and counts the
   outbox's messages per idempotency key. It exits non-zero if any reminder went out
   twice, the run did not complete, or the audit failed.

Everything lives in one directory (SQLite journal, outbox, collections log): a fresh
temporary one unless ``--data DIR`` is given. No server is needed.
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
import uuid
from datetime import date
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from invoice_followup.flow import FollowUpInput, followup, make_tools
from invoice_followup.systems import Erp, Outbox
from underway import Client, Engine, Runner, connect
from underway import events as ev

AS_OF = date(2024, 6, 1)
WAIT_DAYS = 3.0
SECONDS_PER_DAY = 0.15
# Effects before the kill: fetch overdue (1), reminder #1 (2), payment check #1 (3),
# outcome #1 (4), reminder #2 (5): the process dies right after the gateway accepted
# reminder #2, before the journal recorded it.
CRASH_AT_EFFECT = 5


def database(data: Path) -> str:
    """The SQLite URL of the demo's journal."""
    return f"sqlite:///{data / 'underway.db'}"


# -- the worker (runs in a child process) -----------------------------------------------


def work(data: Path, run_id: str) -> int:
    """Start the run (or find it: the idempotency key makes starting twice harmless) and
    drive it to the end."""
    store = connect(database(data))
    try:
        engine = Engine(store, flows=[followup], tools=make_tools(data))
        request = FollowUpInput(as_of=AS_OF, wait_days=WAIT_DAYS, seconds_per_day=SECONDS_PER_DAY)
        engine.start(followup, request, run_id=run_id,
                     idempotency_key=f"invoice-followup:{AS_OF.isoformat()}")
        state = asyncio.run(Runner(engine, poll=0.05).run_until_complete(run_id))
        return 0 if state.status == "completed" else 1
    finally:
        store.close()


def spawn(data: Path, run_id: str, *, crash_at: int | None = None) -> int:
    """Run a worker in a fresh process; return its exit status (negative: killed by signal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_at is not None:
        env |= {"UNDERWAY_CRASH_AFTER": str(crash_at), "UNDERWAY_CRASH_POINTS": "effect.after_run"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "work", "--data", str(data),
           "--run-id", run_id]
    return subprocess.run(cmd, env=env, check=False).returncode


def show_run(url: str, run_id: str) -> str:
    """What ``underway runs show RUN`` prints for the run: its header and timeline."""
    script = Path(sys.executable).with_name("underway")
    command = [str(script)] if script.exists() else [
        sys.executable, "-c", "import sys; from underway.cli import main; sys.exit(main())"]
    done = subprocess.run([*command, "--db", url, "runs", "show", run_id],
                          capture_output=True, text=True, check=True)
    return done.stdout.rstrip()


# -- the demonstration ------------------------------------------------------------------


def say(text: str = "") -> None:
    """Print at once (the output interleaves with child processes)."""
    print(text, flush=True)


def pending_reminder(records: list[ev.Event]) -> ev.ToolStarted | None:
    """The reminder whose intent is journaled without an outcome, if any."""
    pending: dict[str, ev.ToolStarted] = {}
    for e in records:
        if isinstance(e, ev.ToolStarted):
            pending[e.key] = e
        elif isinstance(e, ev.ToolSucceeded | ev.ToolFailed | ev.ToolTimedOut):
            pending.pop(e.key, None)
    return next(iter(pending.values()), None)


def demo(data: Path) -> int:
    """Run the whole demonstration; return the process exit status."""
    run_id = f"followup-{uuid.uuid4().hex[:8]}"
    url = database(data)
    overdue = Erp(data).overdue(AS_OF)
    say("underway demo: an invoice follow-up agent that survives SIGKILL")
    say(f"data in {data}")
    say(f"{len(overdue)} invoices are overdue on {AS_OF}; each gets one reminder, then "
        f"{WAIT_DAYS:g} days (here {WAIT_DAYS * SECONDS_PER_DAY:g}s) to pay")
    say()

    say(f"[1] worker 1 starts run {run_id}; it will be killed with SIGKILL")
    status = spawn(data, run_id, crash_at=CRASH_AT_EFFECT)
    if status != -signal.SIGKILL:
        say(f"FAIL: worker 1 was expected to die by SIGKILL, but exited with status {status}")
        return 1
    with Client.connect(url, migrate=False) as client:
        history = [r.event for r in client.history(run_id)]
    intent = pending_reminder(history)
    outbox = Outbox(data)
    if intent is None or outbox.find(intent.key) is None:
        say("FAIL: the kill did not land between sending a reminder and journaling it")
        return 1
    say(f"    worker 1 killed (SIGKILL): the outbox accepted reminder {intent.key}")
    say(f"    but the journal holds only its intent (seq {len(history)}): outcome unknown")
    say()

    say("[2] worker 2, a fresh process, resumes the run")
    began = time.monotonic()
    status = spawn(data, run_id)
    say(f"    worker 2 exited with status {status} after {time.monotonic() - began:.1f}s")
    say()

    with Client.connect(url, migrate=False) as client:
        state = client.state(run_id)
        audit = client.verify(run_id)
    say(f"[3] timeline (`underway runs show {run_id}`)")
    say()
    say(show_run(url, run_id))
    say()

    failures = []
    say("[4] audit")
    if audit.ok:
        say(f"    hash chain of {audit.events} events verified: intact")
    else:
        say(f"    TAMPERED at seq {audit.bad_seq}: {audit.reason}")
        failures.append("the audit failed")
    say()

    say("[5] outbox: messages sent per idempotency key")
    sent = outbox.sent_per_key()
    by_key = {m["key"]: m["to"] for m in outbox.messages()}
    for key, count in sent.items():
        say(f"    {key:<40} {by_key[key]:<30} sent {count}x")
    twice = sorted(k for k, n in sent.items() if n > 1)
    if twice:
        failures.append(f"reminders sent more than once: {', '.join(twice)}")
    if len(sent) != len(overdue):
        failures.append(f"{len(sent)} reminders for {len(overdue)} overdue invoices")
    if state.status != "completed":
        failures.append(f"the run ended {state.status}, not completed")
    say()
    if failures:
        for failure in failures:
            say(f"FAIL: {failure}")
        return 1
    say(f"OK: run completed, {len(sent)} reminders, each sent exactly once, "
        "despite the SIGKILL between sending one and recording it")
    script = Path(sys.executable).with_name("underway")
    command = os.path.relpath(script) if script.exists() else "underway"
    say(f"explore: {command} --db {url} runs show {run_id}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``demo.py [--data DIR]`` runs the demo; ``demo.py work ...`` is the worker."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", choices=["demo", "work"], default="demo")
    parser.add_argument("--data", type=Path, help="directory for the journal and the outbox")
    parser.add_argument("--run-id", help="(worker) the run to start or resume")
    args = parser.parse_args(argv)
    if args.mode == "work":
        if args.data is None or args.run_id is None:
            parser.error("work needs --data and --run-id")
        return work(args.data, args.run_id)
    data = args.data or Path(tempfile.mkdtemp(prefix="underway-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    if (data / "underway.db").exists():
        parser.error(f"{data} already holds a demo journal; pass an empty --data directory")
    return demo(data)


if __name__ == "__main__":
    sys.exit(main())
