"""Reminders in the customer's language (English, Hindi, Tamil, Bengali, Marathi), on a
channel they consented to, on SQLite and PostgreSQL: each language's message from its
templates, the language and the consent recorded in the result, a person deciding when the
language has no templates, and the policy stopping a reminder whose consent was withdrawn.
Checks read the gateway's outbox and the journal."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.collections_agent import reminders_demo  # noqa: E402
from examples.collections_agent.languages import (  # noqa: E402
    LANGUAGES,
    TEXTS,
    UnsupportedLanguage,
    format_inr,
    language_of,
    render,
)
from examples.collections_agent.reminders import (  # noqa: E402
    COLLECTIONS,
    Gateway,
    consent_purpose,
    localized_reminder,
    make_reminder_tools,
)
from examples.collections_agent.tools import COERCIVE_PHRASES, Reminder  # noqa: E402

from underway import Client, Engine, Runner, connect  # noqa: E402
from underway import events as ev  # noqa: E402
from underway.guard.approvals import (  # noqa: E402
    generate_keypair,
    load_private_key,
    register_approver,
    write_private_key,
)

DEMO = ROOT / "examples" / "collections_agent" / "reminders_demo.py"
SCRIPT = {"hi": "DEVANAGARI", "mr": "DEVANAGARI", "ta": "TAMIL", "bn": "BENGALI",
          "en": "LATIN"}
TEMPLATES = ("first_reminder", "second_reminder", "final_reminder", "balance_corrected")


def scripts_of(text: str) -> set[str]:
    """The scripts of the letters in ``text`` (from their Unicode names)."""
    return {unicodedata.name(c).split()[0] for c in text if c.isalpha()}


# -- templates --------------------------------------------------------------------------------


@pytest.mark.parametrize(("amount", "written"), [
    ("0", "₹0.00"), ("999.5", "₹999.50"), ("1000", "₹1,000.00"), ("18500.00", "₹18,500.00"),
    ("124750.50", "₹1,24,750.50"), ("1234567.891", "₹12,34,567.89"),
    ("100000000", "₹10,00,00,000.00"), ("-64000", "-₹64,000.00"),
])
def test_rupees_are_grouped_the_indian_way(amount: str, written: str) -> None:
    assert format_inr(Decimal(amount)) == written


@pytest.mark.parametrize(("tag", "language"), [
    ("hi", "hi"), ("hi-IN", "hi"), ("HI_in", "hi"), ("mr-Deva-IN", "mr"), ("ta-IN", "ta"),
    ("bn-BD", "bn"), ("en", "en"), ("or-IN", None), ("ur", None), ("", None), (None, None),
    ("  ", None),
])
def test_language_tags_on_file_map_to_templates(tag: str | None, language: str | None) -> None:
    assert language_of(tag) == language


@pytest.mark.parametrize("language", list(LANGUAGES))
@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_renders_in_its_language_with_the_facts(
    language: str, template: Any,
) -> None:
    subject, body = render(language, template, customer="Sharma Hardware", invoice="INV-3101",
                           amount=Decimal("124750.50"), due=date(2024, 6, 10),
                           written_off=Decimal("9600"))
    assert "INV-3101" in subject and "INV-3101" in body and "Sharma Hardware" in body
    money = "124750.50" if language == "en" else "₹1,24,750.50"
    when = "2024-06-10" if language == "en" else "10-06-2024"
    assert money in body
    assert when in body or template == "balance_corrected"
    if template == "balance_corrected":
        assert ("9600" if language == "en" else "₹9,600.00") in body
    # Written in its own script (the customer's name and the invoice id aside).
    own = body.replace("Sharma Hardware", "").replace("INV", "")
    assert scripts_of(own) == {SCRIPT[language]}
    assert "{" not in body and "{" not in subject  # every placeholder filled
    assert not any(p in body.lower() for p in COERCIVE_PHRASES)


def test_the_languages_differ_and_marathi_is_not_hindi() -> None:
    bodies = {lang: render(lang, "first_reminder", customer="X", invoice="INV-1",
                           amount=Decimal(1), due=date(2024, 1, 1))[1] for lang in LANGUAGES}
    assert len(set(bodies.values())) == len(LANGUAGES)
    assert "इनव्हॉइस" in bodies["mr"] and "इनवॉइस" in bodies["hi"]


def test_a_language_without_templates_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedLanguage, match="'or'"):
        render("or", "first_reminder", customer="X", invoice="INV-1", amount=Decimal(1),
               due=date(2024, 1, 1))
    assert set(TEXTS) == set(LANGUAGES) == {"en", "hi", "ta", "bn", "mr"}


def test_the_agents_reminder_tool_takes_the_language() -> None:
    schema = Reminder.model_json_schema()["properties"]["language"]
    assert set(schema["enum"]) == set(LANGUAGES) and schema["default"] == "en"


# -- the flow ---------------------------------------------------------------------------------


@dataclass
class World:
    """An engine running the reminder flow, its outbox, and a person in collections."""

    engine: Engine
    client: Client
    gateway: Gateway
    key: Any

    def start(self, customer: str, **more: Any) -> str:
        run_id, _ = self.engine.start(localized_reminder, {
            "customer_id": customer, "invoice_id": f"INV-3{customer[2:]}", **more},
            subject=customer, purpose="collections")
        return run_id

    def run(self, run_id: str) -> Any:
        return asyncio.run(Runner(self.engine).run_until_complete(run_id))

    def grant(self, customer: str, *channels: str) -> None:
        for channel in channels:
            self.client.grant_consent(customer, consent_purpose(channel), by="crm",
                                      reference=f"CM-{customer}-{channel}")

    def answer(self, run_id: str, reply: dict[str, Any]) -> None:
        reminders_demo.answer(self.client, run_id, self.key, reply, self.engine.clock.now())

    def history(self, run_id: str) -> list[Any]:
        return [r.event for r in self.client.history(run_id)]


@pytest.fixture
def world(db: str, tmp_path: Path) -> Iterator[World]:
    store = connect(db)
    client = Client(store)
    engine = Engine(store, flows=[localized_reminder],
                    tools=make_reminder_tools(tmp_path, client))
    pem, public = generate_keypair()
    write_private_key(tmp_path / "arjun.pem", pem)
    register_approver(store, reminders_demo.PERSON, public_key=public, roles=[COLLECTIONS],
                      now=engine.clock.now())
    yield World(engine, client, Gateway(tmp_path), load_private_key(tmp_path / "arjun.pem"))
    store.close()


PER_LANGUAGE = [("C-101", "hi", "whatsapp"), ("C-102", "ta", "sms"),
                ("C-103", "bn", "whatsapp"), ("C-104", "mr", "whatsapp"),
                ("C-105", "en", "email")]


@pytest.mark.parametrize(("customer", "language", "channel"), PER_LANGUAGE,
                         ids=[p[1] for p in PER_LANGUAGE])
def test_each_language_is_sent_in_its_own_words_with_the_consent_recorded(
    world: World, customer: str, language: str, channel: str,
) -> None:
    world.grant(customer, channel)
    run_id = world.start(customer, template="second_reminder")
    state = world.run(run_id)
    assert state.status == "completed"
    [message] = world.gateway.messages()
    assert (message["language"], message["channel"], message["customer_id"]) == (
        language, channel, customer)
    expected = render(language, "second_reminder", customer=state.state["customer"],
                      invoice=f"INV-3{customer[2:]}", amount=_amount(customer),
                      due=_due(customer))
    assert (message["subject"], message["body"]) == expected
    result = state.result
    assert (result["outcome"], result["language"], result["language_chosen_by"]) == (
        "sent", language, "profile")
    assert result["consent"]["reference"] == f"CM-{customer}-{channel}"
    assert result["consent"]["purpose"] == f"reminders.{channel}"
    assert result["message_id"] == message["message_id"]
    # The language is in the call's journaled arguments, the consent check in its decision.
    [started] = [e for e in world.history(run_id) if isinstance(e, ev.ToolStarted)]
    assert (started.tool, started.args["language"]) == ("send_localized_reminder", language)


def test_the_first_preferred_channel_with_consent_is_used(world: World) -> None:
    world.grant("C-104", "whatsapp", "sms")
    world.client.withdraw_consent("C-104", consent_purpose("whatsapp"), by="C-104")
    state = world.run(world.start("C-104"))
    assert (state.result["channel"], state.result["consent"]["reference"]) == (
        "sms", "CM-C-104-sms")
    assert [c["state"] for c in state.state["consents"]] == ["withdrawn", "granted", "never"]


def test_no_consent_on_any_channel_sends_nothing(world: World) -> None:
    state = world.run(world.start("C-101"))
    assert (state.status, state.result["outcome"]) == ("completed", "not_sent")
    assert "none of their channels" in state.result["why"]
    assert world.gateway.messages() == []


@pytest.mark.parametrize("customer", ["C-106", "C-107"])  # Odia on file; nothing on file
def test_without_templates_a_person_chooses_the_language(world: World, customer: str) -> None:
    channel = "whatsapp" if customer == "C-106" else "sms"
    world.grant(customer, channel)
    run_id = world.start(customer)
    assert world.run(run_id).status == "escalated"
    [asked] = [e for e in world.history(run_id) if isinstance(e, ev.Escalated)]
    assert asked.cause == "question" and asked.required_role == COLLECTIONS
    assert isinstance(asked.context, dict)
    assert asked.context["language_on_file"] == ("or-IN" if customer == "C-106" else None)
    assert world.gateway.messages() == []  # nothing is sent while a person decides
    world.answer(run_id, {"language": "xx"})  # not a language we have: asked again
    assert world.run(run_id).status == "escalated"
    world.answer(run_id, {"language": "hi"})
    state = world.run(run_id)
    assert (state.result["outcome"], state.result["language"],
            state.result["language_chosen_by"]) == ("sent", "hi", "person")
    [message] = world.gateway.messages()
    assert message["language"] == "hi" and scripts_of(message["subject"]) >= {"DEVANAGARI"}
    answered = [e for e in world.history(run_id) if isinstance(e, ev.EscalationAnswered)]
    assert [a.decision["approver_id"] for a in answered] == [reminders_demo.PERSON] * 2


def test_a_person_may_contact_the_customer_instead(world: World) -> None:
    world.grant("C-106", "whatsapp")
    run_id = world.start("C-106")
    world.run(run_id)
    world.answer(run_id, {"handled": True, "note": "called in Odia"})
    state = world.run(run_id)
    assert (state.result["outcome"], state.result["why"]) == ("handled_by_person",
                                                             "called in Odia")
    assert world.gateway.messages() == []


def test_consent_withdrawn_while_a_person_decides_stops_the_reminder(world: World) -> None:
    world.grant("C-107", "sms")
    run_id = world.start("C-107")
    world.run(run_id)
    world.client.withdraw_consent("C-107", consent_purpose("sms"), by="C-107 via SMS STOP")
    world.answer(run_id, {"language": "en"})
    state = world.run(run_id)
    assert (state.status, state.result["outcome"]) == ("completed", "not_sent")
    assert "withdrew consent to 'reminders.sms'" in state.result["why"]
    assert world.gateway.messages() == []
    history = world.history(run_id)
    [decided] = [e for e in history if isinstance(e, ev.PolicyDecided)
                 and e.tool == "send_localized_reminder"]
    assert (decided.decision, decided.rule_id) == ("deny", "sms-reminders-need-consent")
    assert any(isinstance(e, ev.ToolRefused) for e in history)


def test_the_demo_says_ok(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(DEMO), "--data", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "OK: every reminder in the customer's language" in done.stdout
    languages = [m["language"] for m in Gateway(tmp_path / "d").messages()]
    assert sorted(languages) == ["bn", "en", "en", "hi", "mr", "ta"]


def _amount(customer: str) -> Decimal:
    return {"C-101": Decimal("18500.00"), "C-102": Decimal("124750.50"),
            "C-103": Decimal("7200.00"), "C-104": Decimal("64000.00"),
            "C-105": Decimal("9999.00")}[customer]


def _due(customer: str) -> date:
    return {"C-101": date(2024, 6, 10), "C-102": date(2024, 6, 5), "C-103": date(2024, 6, 12),
            "C-104": date(2024, 5, 30), "C-105": date(2024, 6, 1)}[customer]
