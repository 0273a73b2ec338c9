"""`make demo`: an invoice-collections agent that survives SIGKILL and asks finance first.

Three overdue invoices, one agent run each, driven by real ``underway worker`` processes
against simulated outside systems (ERP, payments, e-mail gateway, finance). The first
worker is killed with SIGKILL right after the gateway accepted a reminder and before the
journal recorded it; its replacement finishes the runs without sending anything twice. A
write-off above 5,000 INR waits for a finance approver, who signs it with the real CLI.
At the end: every run's timeline, its cost, the audit of the journal, ``underway
eval``'s figures and what the outside systems saw. The journal is encrypted at rest (a
keyring file in the data directory): the demo scans the raw database file for the
customers' names and addresses. It exits non-zero if a message went out twice, money
moved above the limit without approval, a run did not complete, the audit failed, a call
ran that the guard had not let through, or a customer's name or address is in the
database in plaintext.

Everything lives in one directory: the SQLite journal (``--db URL`` for another database),
the services' records, the approver's key. By default it is ``demo-data/collections_agent``
in the repository, replaced by each new demo and kept after it, so the journal can be
served and browsed afterwards; ``--data DIR`` chooses an empty directory instead. The demo
ends by printing the command that serves the console on that journal, an admin API key to
sign in with, and what to look at there.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.collections_agent import ops
from examples.collections_agent.app import DATA_ENV
from examples.collections_agent.brain import DAY_ENV, WAIT_DAYS, day_seconds
from examples.collections_agent.report import Findings
from examples.collections_agent.scenario import Scenario

from underway import UnderwayError
from underway import events as ev
from underway.apikeys import issue_key
from underway.crypto import KeyringFile
from underway.store import connect

DEMO_DAY_SECONDS = 1.0
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "demo-data" / "collections_agent"
"""Where the demo keeps its files unless ``--data`` says otherwise."""
MARK = ".underway-demo"
"""Marks a directory the demo made: the next demo may replace it."""
CONSOLE = "http://127.0.0.1:8420/"
"""Where ``underway serve`` answers by default."""
SERVICES = {
    "erp": "invoices, disputes, tickets for human teams",
    "payments": "whether an invoice is paid",
    "gateway": "e-mail; delivers once per Idempotency-Key",
    "finance": "refunds and write-offs",
}


def say(text: str = "", indent: int = 0) -> None:
    """Print at once (child processes write to logs, not here)."""
    print(textwrap.indent(text, " " * indent) if text else "", flush=True)


def short(run_id: str) -> str:
    """A run id short enough for a table."""
    return run_id[:8]


def story(scenario: Scenario, began: float) -> Findings:
    """Sections 1-5: services, intake, the kill, the replacement, the approval."""
    say("[1] the outside systems: small local HTTP services (their state: systems.db)")
    for name, url in scenario.start_services().items():
        say(f"{name:<9} {url:<24} {SERVICES[name]}", 4)
    for inv in scenario.invoices():
        say(f"{inv['id']}  {inv['customer']:<20} {inv['amount']:>9} INR  due {inv['due']}", 4)
    say()

    say("[2] intake: the ERP's nightly job reports overdue invoices (one event delivered twice)")
    for event, result in scenario.take_in():
        if result.action == "duplicate":
            outcome = f"duplicate ignored: run {short(result.run_id or '')} already has it"
        else:
            outcome = f"{result.action} run {short(result.run_id or '')}"
        say(f"{event.idempotency_key:<30} -> {outcome}", 4)
    say()

    say("[3] worker 1: `underway worker --concurrency 1`, a real process; the agent plans, "
        "looks up the invoice, checks the payment, sends a reminder...")
    say("it is armed (UNDERWAY_CRASH_AFTER=3) to die by SIGKILL right after its 3rd tool call "
        "ran, before the journal records the result", 4)
    crash = scenario.crash_worker()
    say(f"worker 1 killed by SIGKILL (exit status {crash.exit_status})", 4)
    say(f"the gateway delivered {crash.message_id} for {crash.invoice_id} "
        f"(key {crash.intent.key})", 4)
    say(f"but run {short(crash.run_id)} journals only the send's intent: its outcome is "
        "unknown", 4)
    say()

    say("[4] worker 2 takes over (the dead worker's leases are freed at once on this host)")
    resumed = scenario.resume(crash)
    say("send_reminder is idempotent, so the engine retries it with the same key", 4)
    say(f"gateway: {resumed.requests} requests for that key, {resumed.deliveries} message "
        "delivered: it recognised the retry", 4)
    settled = getattr(resumed.outcome, "result", None)
    say(f"journal: {type(resumed.outcome).__name__} {settled}", 4)
    say(f"meanwhile the agents wait {WAIT_DAYS} days between reminders on durable timers "
        "(no worker held)", 4)
    say()

    say("[5] the policy holds a write-off above 5,000 INR for a finance approver")
    run_id = scenario.held_for_approval()
    for command in scenario.approve(run_id):
        say(f"$ {command.shown}", 4)
        say(command.output.rstrip(), 8)
    say(f"(every command also got --db {scenario.db})", 4)
    say()

    say("[6] the runs finish")
    findings = scenario.finish()
    say(f"all {len(findings.runs)} runs settled after {time.monotonic() - began:.1f}s", 4)
    say()
    return findings


def summary(scenario: Scenario, findings: Findings, wall: float) -> None:
    """Section 6: timelines, costs, audit and evaluation metrics."""
    for r in findings.runs:
        say(f"--- timeline of run {r.state.run_id} ({r.invoice_id}): "
            f"`underway runs show {r.state.run_id}`")
        say(ops.cli("runs", "show", r.state.run_id, db=scenario.db,
                    keyring=scenario.keyring).stdout.rstrip())
        say()

    if os.environ.get("UNDERWAY_MODEL"):
        say(f"per run (model {os.environ['UNDERWAY_MODEL']}; cost from the journal, priced "
            "by the adapter's price table: a model it does not list counts $0):")
    else:
        say("per run (cost from the journal; the rule-based brain is priced at a notional "
            "$0.15 per million tokens):")
    say(f"{'run':<9} {'invoice':<9} {'status':<10} {'outcome':<22} {'iter':>4} "
        f"{'model':>5} {'tokens':>7} {'USD':>8}", 4)
    for r in findings.runs:
        s = r.state
        say(f"{short(s.run_id):<9} {r.invoice_id:<9} {s.status:<10} {r.outcome:<22} "
            f"{r.iterations:>4} {s.model_calls:>5} {s.tokens_in + s.tokens_out:>7} "
            f"{s.cost_usd:>8.4f}", 4)
    say()

    say("$ underway audit verify   (no keys needed: the chain covers the encrypted bytes)")
    say(ops.cli("audit", "verify", db=scenario.db).stdout.rstrip(), 4)
    say()
    if scenario.keyring is not None:
        say("encryption at rest: every payload sealed with AES-256-GCM under the tenant's "
            f"data key, wrapped by the key in {scenario.keyring.name}")
        hits = plaintext_hits(scenario.db, scenario.invoices())
        say(f"customers' names and addresses found in plaintext in the database file and "
            f"its WAL: {len(hits)}" + (f" ({', '.join(hits)})" if hits else ""), 4)
        first = findings.runs[0].state.run_id
        sealed = ops.cli("runs", "show", first, db=scenario.db).stdout
        shown = sum("[encrypted]" in line for line in sealed.splitlines())
        say(f"`underway runs show {short(first)}` without the keyring: {shown} lines read "
            "[encrypted]", 4)
        findings.violations += [f"{name!r} is stored in plaintext" for name in hits]
        say()

    say("$ underway eval   (measured from the journal alone: docs/evaluation.md)")
    say(ops.cli("eval", db=scenario.db, keyring=scenario.keyring).stdout.rstrip(), 4)
    say()

    say("$ underway replay --config underway.toml --flow collections --since 2000-01-01 "
        "--fail-on-change   (the same code: no decision may change)")
    replayed = ops.replay_unchanged(scenario.data, scenario.db, scenario.keyring)
    say((replayed.stdout + replayed.stderr).rstrip(), 4)
    if replayed.returncode != 0:
        findings.violations.append(f"a replay of the unchanged code exited with "
                                   f"{replayed.returncode}: a decision would change")
    say()

    e = findings.evaluation
    total = len(findings.runs)
    delivered = len(findings.messages)
    keys = len({m["key"] for m in findings.messages})
    retries = len(findings.send_requests) - keys
    unpaid = [r for r in findings.runs if r.invoice_id not in findings.paid]
    money = "; ".join(f"{m['kind']} {m['amount']} INR on {m['invoice_id']}"
                      for m in findings.money) or "none"
    journaled = ", ".join(f"{v:,.2f} {cur}" for cur, v in e.cost.money.items()) or "none"
    rows = [
        ("goal completion", f"{len(findings.paid)}/{total} invoices paid "
         f"({100 * len(findings.paid) / max(total, 1):.0f}%)" + "".join(
             f"; {r.invoice_id}: {r.outcome.replace('_', ' ')}" for r in unpaid)),
        ("reminders", f"{delivered} delivered, {keys} unique keys, "
         f"{delivered - keys} duplicates (the journal: {len(e.effects.duplicates)}); "
         f"{len(findings.send_requests)} send requests ({retries} retry recognised by the "
         "gateway)"),
        ("money moved", f"{money} (the journal: {journaled})"),
        ("coercive messages", f"{findings.coercive_blocked} blocked (policy rule and the "
         f"tool's own check), {findings.coercive_delivered} delivered"),
        ("agent iterations", str(findings.iterations)),
        ("wall time", f"{wall:.1f}s"),
    ]
    say("what the outside systems saw, matched against the journal:")
    for name, value in rows:
        say(f"{name:<18} {value}", 4)
    say()


def demo(data: Path, db: str) -> int:
    """Run the whole demonstration; return the process exit status."""
    began = time.monotonic()
    day = day_seconds() if os.environ.get(DAY_ENV) else DEMO_DAY_SECONDS
    say("underway demo: an invoice-collections agent on durable runs")
    say(f"data in {data}; journal {db}")
    say(f"a day lasts {day:g}s here ({DAY_ENV}): the agent's {WAIT_DAYS}-day waits take "
        f"{WAIT_DAYS * day:g}s")
    say()
    keyring = data / "keyring.json"
    KeyringFile.create(keyring)
    say(f"the journal is encrypted at rest with the key in {keyring} (mode 0600)")
    say()
    scenario = Scenario(data, db, day_seconds=day, keyring=keyring)
    try:
        findings = story(scenario, began)
        summary(scenario, findings, time.monotonic() - began)
    except (UnderwayError, TimeoutError) as exc:
        say(f"FAIL: {exc}")
        say(f"worker logs: {data / 'worker-1.log'}, {data / 'worker-2.log'}")
        return 1
    finally:
        scenario.close()
    if findings.violations:
        for problem in findings.violations:
            say(f"FAIL: {problem}")
        return 1
    say("OK: every run completed; no message went out twice despite the SIGKILL; money above "
        "5,000 INR moved only with a signed finance approval; every hash chain verifies")
    say(f"explore: {underway_command()} --db {shlex.quote(db)} --keyring "
        f"{shlex.quote(str(keyring))} runs ls")
    say(f"replay: {DATA_ENV}={shlex.quote(str(data))} {underway_command()} --db "
        f"{shlex.quote(db)} --keyring {shlex.quote(str(keyring))} replay --config "
        f"{shlex.quote(str(data / 'underway.toml'))} --flow collections --since 2000-01-01 "
        "--fail-on-change")
    say()
    console(db, findings, keyring)
    return 0


def plaintext_hits(db: str, invoices: list[dict[str, Any]]) -> list[str]:
    """The customers' names and addresses that appear, as they are, in the raw bytes of
    the SQLite database file or its write-ahead log (empty: none does)."""
    if not db.startswith("sqlite:///"):
        return []
    path = Path(db.removeprefix("sqlite:///"))
    raw = b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal"))
                   if p.exists())
    return [text for inv in invoices for text in (inv["customer"], inv["contact"])
            if text.encode() in raw]


def underway_command() -> str:
    """The ``underway`` command as the reader would type it: this Python's script, relative
    to the current directory when it is below it (``.venv/bin/underway``)."""
    script = Path(sys.executable).parent / "underway"
    if not script.exists():
        return "underway"
    try:
        return shlex.quote(str(script.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(script))


def console(db: str, findings: Findings, keyring: Path) -> None:
    """The last section: how to serve the console on this journal, and what to see there."""
    store = connect(db)
    try:
        key = issue_key(store, tenant_id="default", role="admin", name="demo console",
                        now=time.time())
    finally:
        store.close()
    held = next((r for r in findings.runs if r.events(ev.ApprovalRequested)), None)
    shown = held or findings.runs[0]
    say("[7] the console: serve this journal over HTTP and look around")
    say(f"$ {underway_command()} serve --db {shlex.quote(db)} --keyring "
        f"{shlex.quote(str(keyring))}", 4)
    say(f"then open {CONSOLE} and sign in with this admin API key of tenant default "
        "(shown once; `underway apikeys new` makes more):", 4)
    say(key.token, 8)
    say("there, look at:", 4)
    say(f"the runs table: the {len(findings.runs)} runs of this demo, one per invoice", 8)
    say(f"run {shown.state.run_id} ({shown.invoice_id}): its timeline" + (
        ", with the write-off the policy held for finance and priya's signed approval"
        if held is not None else ""), 8)
    say("the approvals inbox: empty now that the write-off is approved; a request the "
        "policy holds waits there for a signed decision", 8)


def main(argv: list[str] | None = None) -> int:
    """``demo.py [--data DIR] [--db URL]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, help="an empty directory for the demo's files "
                        f"(default: {DEFAULT_DATA}, replaced by each demo)")
    parser.add_argument("--db", help="journal database URL (default: SQLite in the data dir)")
    args = parser.parse_args(argv)
    try:
        data = data_dir(args.data)
    except FileExistsError as exc:
        parser.error(str(exc))
    return demo(data, args.db or f"sqlite:///{data / 'underway.db'}")


def data_dir(given: Path | None, default: Path = DEFAULT_DATA) -> Path:
    """The directory for this demo's files, empty: ``given``, or ``default`` with an earlier
    demo's files removed (only when a demo made it: it holds :data:`MARK`)."""
    data = (given or default).resolve()
    if given is None and (data / MARK).exists():
        shutil.rmtree(data)
    data.mkdir(parents=True, exist_ok=True)
    if any(data.iterdir()):
        raise FileExistsError(f"{data} is not empty; pass an empty --data directory")
    if given is None:
        (data / MARK).touch()
    return data


if __name__ == "__main__":
    sys.exit(main())
