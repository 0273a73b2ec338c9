"""Payment reminders in the customer's language, on a channel they consented to.

Seven customers: one each writing Hindi, Tamil, Bengali, Marathi and English, one whose
language (Odia) has no templates, and one with no language on file. Their consents to
reminders per channel are recorded in the consent store; the Marathi customer withdrew
WhatsApp, so their reminder goes by SMS. For the two without templates a person in
collections decides — send in a language we have, or contact the customer themselves —
with a signed answer. Then one customer withdraws consent while a person is deciding,
and the policy stops that reminder at the call.

The demo prints each message as sent, each run's result (language, who chose it, channel,
the consent it relied on), and exits non-zero if anything is not as it must be.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from examples.collections_agent.reminders import (
    COLLECTIONS,
    Gateway,
    consent_purpose,
    localized_reminder,
    make_reminder_tools,
)

from underway import Client, Engine, Runner, connect
from underway.guard.approvals import (
    generate_keypair,
    load_private_key,
    register_approver,
    sign_decision,
    write_private_key,
)

CONSENTS = {
    # customer: channels consented to (C-104 consented to WhatsApp, then withdrew it)
    "C-101": ["whatsapp"], "C-102": ["sms", "email"], "C-103": ["whatsapp"],
    "C-104": ["whatsapp", "sms"], "C-105": ["email"], "C-106": ["whatsapp"],
    "C-107": ["sms"],
}
PERSON = "arjun"
ANSWERS: dict[str, dict[str, Any]] = {
    "C-106": {"handled": True, "note": "called Mr Mohanty in Odia; paying Friday"},
    "C-107": {"language": "en"},
}
EXPECTED = {
    "C-101": ("sent", "hi", "whatsapp"), "C-102": ("sent", "ta", "sms"),
    "C-103": ("sent", "bn", "whatsapp"), "C-104": ("sent", "mr", "sms"),
    "C-105": ("sent", "en", "email"), "C-106": ("handled_by_person", None, "whatsapp"),
    "C-107": ("sent", "en", "sms"),
}


def say(text: str = "") -> None:
    """Print at once."""
    print(text, flush=True)


def record_consents(client: Client) -> None:
    """What the consent manager recorded for each customer."""
    for n, (customer, channels) in enumerate(sorted(CONSENTS.items()), start=1):
        for channel in channels:
            client.grant_consent(customer, consent_purpose(channel), by="consent-manager",
                                 reference=f"CM-2024-{n:04d}-{channel}")
    client.withdraw_consent("C-104", consent_purpose("whatsapp"), by="C-104 via WhatsApp "
                            "'STOP'")


def answer(client: Client, run_id: str, key: Any, reply: dict[str, Any], now: float) -> None:
    """Sign ``reply`` as the person in collections and send it to the run's question."""
    pending = client.pending_request(run_id)
    if pending is None or pending.kind != "question":
        raise RuntimeError(f"run {run_id} asks nothing")
    signed = sign_decision(key, request_id=pending.request_id, run_id=run_id,
                           tenant_id="default", tool=pending.tool, args_hash=pending.args_hash,
                           decision="answer", expires_at=min(pending.expires_at, now + 3600),
                           approver_id=PERSON, answer=reply)
    client.submit_decision(signed.model_dump(mode="json"))


def demo(data: Path) -> int:
    """Run every customer's reminder; return the exit status."""
    store = connect(f"sqlite:///{data / 'underway.db'}")
    failures: list[str] = []
    try:
        client = Client(store)
        engine = Engine(store, flows=[localized_reminder],
                        tools=make_reminder_tools(data, client))
        pem, public = generate_keypair()
        write_private_key(data / f"{PERSON}.pem", pem)
        key = load_private_key(data / f"{PERSON}.pem")
        register_approver(store, PERSON, public_key=public, roles=[COLLECTIONS],
                          now=engine.clock.now())
        record_consents(client)
        runner = Runner(engine)
        say("Reminders in the customer's language, on a channel they consented to")
        say(f"data in {data}\n")
        for n, customer in enumerate(sorted(EXPECTED), start=1):
            run_id, _ = engine.start(localized_reminder, {
                "customer_id": customer, "invoice_id": f"INV-3{customer[2:]}"},
                subject=customer, purpose="collections")
            state = asyncio.run(runner.run_until_complete(run_id))
            say(f"[{n}] {customer} {state.state['customer']}")
            if state.status == "escalated":
                pending = client.pending_request(run_id)
                say(f"    asked {COLLECTIONS}: {pending.question if pending else ''}")
                answer(client, run_id, key, ANSWERS[customer], engine.clock.now())
                say(f"    {PERSON} answered (signed): {ANSWERS[customer]}")
                state = asyncio.run(runner.run_until_complete(run_id))
            r = state.result or {}
            consent = r.get("consent") or {}
            say(f"    {r.get('outcome')}: language {r.get('language')} (on file "
                f"{r.get('language_on_file')!r}, chosen by {r.get('language_chosen_by')}), "
                f"channel {r.get('channel')}, consent {consent.get('reference')} recorded by "
                f"{consent.get('by')}")
            got = (r.get("outcome"), r.get("language"), r.get("channel"))
            if state.status != "completed" or got != EXPECTED[customer]:
                failures.append(f"{customer}: {state.status} {got}, not {EXPECTED[customer]}")

        say("\n[withdrawn while a person decides] C-107 texts STOP before the answer arrives")
        run_id, _ = engine.start(localized_reminder, {
            "customer_id": "C-107", "invoice_id": "INV-3107", "template": "second_reminder"},
            subject="C-107", purpose="collections")
        asyncio.run(runner.run_until_complete(run_id))
        client.withdraw_consent("C-107", consent_purpose("sms"), by="C-107 via SMS 'STOP'")
        answer(client, run_id, key, {"language": "en"}, engine.clock.now())
        state = asyncio.run(runner.run_until_complete(run_id))
        r = state.result or {}
        say(f"    {r.get('outcome')}: {r.get('why')}")
        if r.get("outcome") != "not_sent":
            failures.append("the reminder after the withdrawal was not stopped")

        messages = Gateway(data).messages()
        say(f"\n[outbox] {len(messages)} messages, each in its customer's language")
        for m in messages:
            say(f"\n--- {m['customer_id']} · {m['language']} · {m['channel']} to {m['to']}")
            say(f"{m['subject']}\n\n{m['body']}")
        if len(messages) != 6 or len({m["key"] for m in messages}) != 6:
            failures.append(f"{len(messages)} messages sent, not 6")
    finally:
        store.close()
    say()
    for failure in failures:
        say(f"FAIL: {failure}")
    if not failures:
        say("OK: every reminder in the customer's language, only where they consent; "
            "a person took over where we have no templates")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """``reminders_demo.py [--data DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, help="an empty directory (default: a new one)")
    args = parser.parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="underway-reminders-"))
    data.mkdir(parents=True, exist_ok=True)
    if any(data.iterdir()):
        parser.error(f"{data} is not empty; pass an empty --data directory")
    return demo(data)


if __name__ == "__main__":
    sys.exit(main())
