"""Reconcile June 2024's purchase register against GSTR-2B, with a reviewer deciding every
mismatch by a signed answer.

1. The run fetches both sides, matches them, and books the credit of every matched invoice.
2. Each mismatch becomes a question to the ``gst_reviewer`` role, with the evidence as its
   context; the run waits holding no worker. The reviewer (Meera, with an Ed25519 key) reads
   it — the demo prints what ``underway approvals show`` prints for the first one — and
   answers with a signed decision. One answer (credit on an invoice the supplier never
   reported) is refused by the flow and the question asked again.
3. The demo prints the ITC ledger, the run's result and its hash-chain audit, and exits
   non-zero if anything is not as it must be.

Everything lives in one directory (SQLite journal, ITC ledger, the reviewer's key): a fresh
temporary one unless ``--data DIR`` is given. No server is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from examples.gst_reconciliation.flow import REVIEWER, gst_reconciliation, make_tools
from examples.gst_reconciliation.systems import Erp

from underway import Client, Engine, Runner, connect
from underway.guard.approvals import (
    generate_keypair,
    load_private_key,
    register_approver,
    sign_decision,
    write_private_key,
)

PERIOD = "2024-06"
REVIEWER_ID = "meera"

DECISIONS: dict[str, list[dict[str, str]]] = {
    # What Meera decides, per invoice, in order: the first answer on HJM/2024/0912 asks for
    # credit the law does not allow and is refused; she then defers it.
    "MPH/0457": [{"decision": "claim",
                  "note": "the supplier issued a credit note for 2,000; claim what 2B shows"}],
    "SPC-88": [{"decision": "defer",
                "note": "supplier to amend: IGST was due (place of supply Maharashtra)"}],
    "HJM/2024/0912": [{"decision": "claim", "note": "we have the invoice"},
                      {"decision": "defer", "note": "chase Hooghly to file GSTR-1"}],
    "DS-19": [{"decision": "defer", "note": "correct the GSTIN in the books to ...2ZA"}],
    "YFC/0629": [{"decision": "defer", "note": "find the goods receipt and book it"}],
}


def database(data: Path) -> str:
    """The SQLite URL of the demo's journal."""
    return f"sqlite:///{data / 'underway.db'}"


def say(text: str = "") -> None:
    """Print at once."""
    print(text, flush=True)


def answer(client: Client, run_id: str, key: Ed25519PrivateKey, approver_id: str,
           reply: dict[str, Any]) -> str:
    """Sign ``reply`` as ``approver_id`` and send it to the question ``run_id`` waits on;
    return the question."""
    pending = client.pending_request(run_id)
    if pending is None or pending.kind != "question" or pending.question is None:
        raise RuntimeError(f"run {run_id} is not waiting for an answer")
    signed = sign_decision(
        key, request_id=pending.request_id, run_id=run_id, tenant_id="default",
        tool=pending.tool, args_hash=pending.args_hash, decision="answer",
        expires_at=min(pending.expires_at, time.time() + 3600), approver_id=approver_id,
        answer=reply,
    )
    client.submit_decision(signed.model_dump(mode="json"))
    return pending.question


def approvals_show(url: str, run_id: str) -> str:
    """What ``underway approvals show RUN`` prints for the run's question."""
    script = Path(sys.executable).with_name("underway")
    command = [str(script)] if script.exists() else [
        sys.executable, "-c", "import sys; from underway.cli import main; sys.exit(main())"]
    done = subprocess.run([*command, "--db", url, "approvals", "show", run_id],
                          capture_output=True, text=True, check=True)
    return done.stdout.rstrip()


def demo(data: Path) -> int:
    """Run the whole demonstration; return the process exit status."""
    url = database(data)
    store = connect(url)
    failures: list[str] = []
    try:
        engine = Engine(store, flows=[gst_reconciliation], tools=make_tools(data))
        client = engine.client
        pem, public = generate_keypair()
        write_private_key(data / f"{REVIEWER_ID}.pem", pem)
        private = load_private_key(data / f"{REVIEWER_ID}.pem")
        register_approver(store, REVIEWER_ID, public_key=public, roles=[REVIEWER],
                          now=time.time())
        run_id, _ = engine.start(gst_reconciliation, {"period": PERIOD},
                                 idempotency_key=f"gst-2b:{PERIOD}")
        say(f"GST reconciliation of {PERIOD}: purchase register against GSTR-2B")
        say(f"data in {data}; run {run_id}")
        asyncio.run(Runner(engine).run_until_idle())
        state = client.state(run_id)
        matched = state.state["matched"]
        say(f"\n[1] matched and booked without a person: {len(matched)} invoices")
        for f in matched:
            say(f"    {f['invoice_no']:<16} {f['supplier_gstin']}  "
                f"{f['books']['supplier']}")
        flagged = state.state["flagged"]
        say(f"\n[2] for review ({REVIEWER}): {len(flagged)} mismatches")
        for f in flagged:
            say(f"    {f['kind']:<18} {f['invoice_no']:<16} {f['problem']}")
        say(f"\n    what the reviewer sees (`underway approvals show {run_id}`):\n")
        say("\n".join("      " + line for line in approvals_show(url, run_id).splitlines()))
        say("\n[3] the reviewer answers, each answer signed with her Ed25519 key")
        replies = {inv: list(answers) for inv, answers in DECISIONS.items()}
        while (pending := client.pending_request(run_id)) is not None:
            invoice = pending.context["invoice_no"] if isinstance(pending.context, dict) \
                else None
            if invoice not in replies or not replies[invoice]:
                failures.append(f"an unexpected question: {pending.question}")
                break
            reply = replies[invoice].pop(0)
            refused = client.state(run_id).state["refused_answers"]
            answer(client, run_id, private, REVIEWER_ID, reply)
            asyncio.run(Runner(engine).run_until_idle())
            again = client.state(run_id).state["refused_answers"] > refused
            say(f"    {invoice:<16} {reply['decision']:<6} ({reply['note']})"
                + ("  -> refused: not allowed for this mismatch; asked again" if again
                   else ""))
        state = client.state(run_id)
        audit = client.verify(run_id)
        entries = Erp(data).entries()
        say("\n[4] the ITC ledger")
        for e in entries:
            credit = sum((Decimal(v) for v in e["itc"].values()), Decimal(0))
            say(f"    {e['invoice_no']:<16} {e['decision']:<6} by {e['by']:<9} "
                f"credit {credit:>10,.2f} INR  {e['note']}")
        say(f"\n[5] result: {json.dumps(state.result)}")
        say(f"    hash chain of {audit.events} events: {'intact' if audit.ok else 'BROKEN'}")
        if state.status != "completed":
            failures.append(f"the run ended {state.status}")
        if not audit.ok:
            failures.append("the audit failed")
        keys = [e["key"] for e in entries]
        if len(keys) != len(set(keys)) or len(entries) != len(matched) + len(flagged):
            failures.append("the ledger does not hold one entry per invoice")
        if any(e["decision"] == "claim" and e["kind"] == "missing_in_return" for e in entries):
            failures.append("credit was taken on an invoice missing from GSTR-2B")
    finally:
        store.close()
    for failure in failures:
        say(f"FAIL: {failure}")
    if not failures:
        say("OK: every invoice booked once; every mismatch decided by a signed answer")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """``demo.py [--data DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, help="an empty directory for the journal and "
                        "the ledger (default: a fresh temporary one)")
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="underway-gst-"))
    data.mkdir(parents=True, exist_ok=True)
    if any(data.iterdir()):
        parser.error(f"{data} is not empty; pass an empty --data directory")
    return demo(data)


if __name__ == "__main__":
    sys.exit(main())
