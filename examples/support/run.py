"""The support-ticket monitor, end to end: ``python examples/support/run.py``.

Plays :mod:`support.scenario` (a desk, real worker processes, one of them killed with
SIGKILL mid-reply) on SQLite in a fresh temporary directory, or on the database given
with ``--db``; prints what happened to each ticket; exits 1 if an invariant failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.report import INJECTION, check, story
from support.scenario import Outcome, ScenarioError, play
from support.tools import DeskTools


def say(text: str = "") -> None:
    """Print at once (worker processes write to their own logs)."""
    print(text, flush=True)


def tell(out: Outcome) -> None:
    """Print the outcome: each ticket's story, drafts, escalations, the injection."""
    tools = {f.name for f in fields(DeskTools)}
    tickets = out.desk["tickets"]
    say("\n[5] what happened, ticket by ticket")
    for ticket_id, t in tickets.items():
        run_id = out.runs.get(ticket_id)
        who = f"{ticket_id} {t['customer']} ({t['priority']}) {t['subject']!r}"
        say(f"\n  {who}: {t['status']}")
        if run_id is not None:
            say(f"    agent run {run_id}")
            for line in story(out.histories[run_id], tools):
                say(f"      - {line}")
        for d in t["drafts"]:
            say(f"    draft: {' '.join(d['body'].split())[:100]}...")
        if t["escalation"]:
            say(f"    escalated to {t['escalation']['queue']}: {t['escalation']['reason']}")
    sweep = out.states[out.sweep_run]
    say(f"\n  SLA sweep run {out.sweep_run}: {sweep.status}, {sweep.result}")
    for line in story(out.histories[out.sweep_run], tools):
        say(f"      - {line}")
    if out.schedule_next is not None:
        nxt = datetime.fromtimestamp(out.schedule_next, UTC).strftime("%H:%M UTC")
        say(f"    scheduled every five minutes; next tick {nxt}")

    say(f"\n[6] the injection attempt on {INJECTION}")
    body = tickets[INJECTION]["body"]
    say(f"    the customer wrote: {' '.join(body.split())[-160:]}")
    for line in story(out.histories.get(out.runs.get(INJECTION, ""), []), tools):
        if any(w in line for w in ("REFUSED", "refused", "held", "rejected")):
            say(f"    blocked: {line}")

    say("\n[7] the desk's outbox: replies per idempotency key")
    attempts = out.desk["attempts"]
    sent = Counter(m["key"] for m in out.desk["outbox"])
    for m in out.desk["outbox"]:
        key = m["key"]
        say(f"    {m['ticket_id']} {key:<52} asked {attempts[key]}x, sent {sent[key]}x")
    say("\n[8] audit: " + ", ".join(
        f"{r[:8]} {'ok' if why is None else why}" for r, why in out.audit.items()))


def main(argv: list[str] | None = None) -> int:
    """Run the demonstration; 0 when every invariant held."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, help="directory for the desk, logs and the "
                        "journal (default: a new temporary directory)")
    parser.add_argument("--db", help="journal database URL (default: SQLite in --data)")
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="underway-support-"))
    if data.exists() and any(data.iterdir()):
        parser.error(f"{data} is not empty; pass an empty or new --data directory")
    db = args.db or f"sqlite:///{data.resolve() / 'underway.db'}"
    say("underway example: a support-ticket monitor (SQLite unless --db says otherwise)")
    say(f"data in {data}")
    try:
        out = play(data, db, say=say)
    except ScenarioError as exc:
        say(f"FAIL: {exc}")
        return 1
    tell(out)
    problems = check(out, scripted=not os.environ.get("UNDERWAY_MODEL"))
    say()
    for problem in problems:
        say(f"FAIL: {problem}")
    if problems:
        return 1
    say(f"OK: {len(out.runs)} tickets each handled once, no reply sent twice across a "
        f"SIGKILL, the injection blocked, the SLA breach escalated ({out.elapsed_s:.1f}s)")
    say(f"explore: underway --db '{db}' runs ls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
