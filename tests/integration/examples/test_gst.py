"""The GST example: GSTIN validation (the check digit, every part of the format), matching
the purchase register against GSTR-2B, and the reconciliation run end to end on SQLite and
PostgreSQL, every mismatch decided by a reviewer's signed answer, with the evidence in the
question. Checks read the ITC ledger and the journal."""

from __future__ import annotations

import asyncio
import string
import subprocess
import sys
import time
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.gst_reconciliation import demo as gst_demo  # noqa: E402
from examples.gst_reconciliation.flow import (  # noqa: E402
    REVIEWER,
    gst_reconciliation,
    make_tools,
)
from examples.gst_reconciliation.gstin import (  # noqa: E402
    InvalidGstin,
    check_digit,
    is_valid,
    parse,
)
from examples.gst_reconciliation.matching import (  # noqa: E402
    Purchase,
    Reported,
    Taxes,
    reconcile,
)
from examples.gst_reconciliation.systems import Erp  # noqa: E402

from underway import Engine, Runner, connect  # noqa: E402
from underway import events as ev  # noqa: E402
from underway.guard.approvals import (  # noqa: E402
    generate_keypair,
    load_private_key,
    register_approver,
    write_private_key,
)
from underway.journal import Journal  # noqa: E402
from underway.testing import memory_engine  # noqa: E402

DEMO = ROOT / "examples" / "gst_reconciliation" / "demo.py"
PUBLISHED = ["27AAPFU0939F1ZV", "29AAGCB7383J1Z4"]
"""Example GSTINs published widely; the algorithm must accept them as they are."""


# -- GSTIN ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gstin", PUBLISHED)
def test_published_gstins_check(gstin: str) -> None:
    assert check_digit(gstin[:14]) == gstin[14]
    parsed = parse(gstin)
    assert (str(parsed), parsed.state_code, parsed.pan) == (gstin, gstin[:2], gstin[2:12])
    assert parsed.state in ("Maharashtra", "Karnataka")
    assert parsed.holder in ("firm or LLP", "company")


def test_the_check_digit_is_the_weighted_mod_36_sum() -> None:
    # The algorithm written again, apart from the example's, checked against the published
    # GSTINs and then used to cross-check the GSTINs the example's data uses.
    alphabet = string.digits + string.ascii_uppercase

    def independent(first14: str) -> str:
        total = 0
        for i, c in enumerate(first14):
            p = alphabet.index(c) * (1 + i % 2)
            total += p // 36 + p % 36
        return alphabet[-total % 36]

    for gstin in [*PUBLISHED, "33AABCT3518Q1Z3", "24AACCG4791M1Z9", "07AAHFS5132K1Z1",
                  "19AAECM8164P1ZN", "36AAFCK2917L2ZA", "27AAACR5055K1Z7"]:
        assert check_digit(gstin[:14]) == independent(gstin[:14]) == gstin[14], gstin
        assert is_valid(gstin)


def test_every_single_character_change_is_caught() -> None:
    gstin = PUBLISHED[0]
    for position in range(15):
        for char in string.digits + string.ascii_uppercase:
            if char != gstin[position]:
                changed = gstin[:position] + char + gstin[position + 1:]
                assert not is_valid(changed), changed


@pytest.mark.parametrize(("text", "problem"), [
    ("27AAPFU0939F1Z", "has 14 characters"),
    ("27AAPFU0939F1ZVX", "has 16 characters"),
    ("27AAPFU0939F1Z ", "has 14 characters"),
    ("27AAPFU0939F1ZW", "check digit is 'W', but the first 14 characters give 'V'"),
    ("00AAPFU0939F1ZV", "'00' is not a GST state code"),
    ("39AAPFU0939F1ZV", "'39' is not a GST state code"),
    ("2AAAPFU0939F1ZV", "is not a GST state code"),
    ("27AAPF00939F1ZV", "not shaped like a PAN"),
    ("27AAPXU0939F1ZV", "4th character 'X' is no kind of holder"),
    ("27AAPFU0939F0ZV", "entity number"),
    ("27AAPFU0939F1YV", "14th character is 'Y'"),
    ("27AAPFU0939F1Z-", "other than 0-9 and A-Z"),
    ("२७AAPFU0939F1ZV", "other than 0-9 and A-Z"),
])
def test_malformed_gstins_are_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InvalidGstin, match=problem.replace("(", r"\(")):
        parse(text)
    assert not is_valid(text)


def test_spaces_around_and_lower_case_are_the_same_gstin() -> None:
    assert str(parse("  27aapfu0939f1zv ")) == "27AAPFU0939F1ZV"


# -- matching ---------------------------------------------------------------------------------


def purchase(gstin: str, number: str, value: str, **taxes: str) -> Purchase:
    return Purchase(supplier_gstin=gstin, supplier="S", invoice_no=number,
                    invoice_date=date(2024, 6, 1), taxable_value=Decimal(value),
                    taxes=Taxes(**{k: Decimal(v) for k, v in taxes.items()}))


def reported(gstin: str, number: str, value: str, itc: bool = True,
             **taxes: str) -> Reported:
    return Reported(supplier_gstin=gstin, supplier="S", invoice_no=number,
                    invoice_date=date(2024, 6, 1), taxable_value=Decimal(value),
                    taxes=Taxes(**{k: Decimal(v) for k, v in taxes.items()}),
                    itc_available=itc, reason="" if itc else "POS rule")


def kinds(books: list[Purchase], returned: list[Reported], **options: Any) -> dict[str, str]:
    found = reconcile(books, returned, **options)
    return {f.invoice_no: f.kind for f in (*found.matched, *found.flagged)}


def test_each_kind_of_mismatch_is_found() -> None:
    a, b = PUBLISHED
    books = [
        purchase(a, "INV/001", "1000", igst="180"),
        purchase(a, "INV/002", "1000", igst="180"),
        purchase(a, "INV/003", "1000", igst="180"),
        purchase(b, "X-1", "1000", igst="180"),
        purchase(b, "X-2", "1000", igst="180"),
        purchase(b, "X-2", "1000", igst="180"),
        purchase("27AAPFU0939F1ZW", "Z-9", "500", igst="90"),
    ]
    returned = [
        reported(a, "inv 001", "1000.40", igst="180.40"),   # rounding: within 1 INR
        reported(a, "INV-002", "900", igst="162"),
        reported(a, "INV.003", "1000", cgst="90", sgst="90"),
        reported(b, "X-1", "1000", itc=False, igst="180"),
        reported(b, "X-2", "1000", igst="180"),
        reported(b, "X-3", "700", igst="126"),
    ]
    assert kinds(books, returned) == {
        "INV/001": "matched", "INV/002": "amount_mismatch", "INV/003": "tax_mismatch",
        "X-1": "itc_unavailable", "X-2": "duplicate_in_books", "Z-9": "invalid_gstin",
        "X-3": "missing_in_books",
    }
    found = reconcile(books, returned)
    assert [f.invoice_no for f in found.matched] == ["INV/001", "X-2"]  # X-2's first booking
    tax = next(f for f in found.flagged if f.kind == "tax_mismatch")
    assert "IGST in the books, CGST and SGST in the return" in tax.problem
    assert {d.field for d in tax.differences} == {"igst", "cgst", "sgst"}
    assert kinds(books[:1], returned[:1], tolerance=Decimal("0.10")) == {
        "INV/001": "amount_mismatch"}
    assert kinds(books[:1], []) == {"INV/001": "missing_in_return"}


def test_a_mistyped_gstin_is_shown_with_the_invoice_the_supplier_reported() -> None:
    good = PUBLISHED[1]
    typo = good[:14] + "5"
    found = reconcile([purchase(typo, "DS-19", "100", igst="18")],
                      [reported(good, "DS 19", "100", igst="18")])
    [finding] = found.flagged
    assert finding.kind == "invalid_gstin" and finding.reported is not None
    assert f"from {good}" in finding.problem and "probably mistyped" in finding.problem
    assert found.matched == ()


def test_credit_is_what_the_return_supports() -> None:
    found = reconcile([purchase(PUBLISHED[0], "A", "1000", cgst="90", sgst="90")],
                      [reported(PUBLISHED[0], "A", "1000", cgst="89.50", sgst="90.20")])
    [match] = found.matched
    assert (match.itc.cgst, match.itc.sgst) == (Decimal("89.50"), Decimal("90.20"))


# -- the run ----------------------------------------------------------------------------------


ANSWERS = {
    "MPH/0457": [{"decision": "claim", "note": "credit note received"}],
    "SPC-88": [{"decision": "reject", "note": "not ours to claim"}],
    "HJM/2024/0912": [{"decision": "claim"}, {"decision": "maybe"}, {"decision": "defer"}],
    "DS-19": [{"decision": "defer"}],
    "YFC/0629": [{"decision": "defer"}],
}


def test_every_mismatch_is_decided_by_a_signed_answer(db: str, tmp_path: Path) -> None:
    store = connect(db)
    try:
        engine = Engine(store, flows=[gst_reconciliation], tools=make_tools(tmp_path))
        pem, public = generate_keypair()
        write_private_key(tmp_path / "meera.pem", pem)
        key = load_private_key(tmp_path / "meera.pem")
        register_approver(store, "meera", public_key=public, roles=[REVIEWER],
                          now=time.time())
        run_id, _ = engine.start(gst_reconciliation, {"period": "2024-06"})
        asyncio.run(Runner(engine).run_until_idle())
        asked: list[str] = []
        queue = {k: list(v) for k, v in ANSWERS.items()}
        while (pending := engine.client.pending_request(run_id)) is not None:
            assert pending.kind == "question" and pending.required_role == REVIEWER
            context = pending.context
            assert isinstance(context, dict)
            asked.append(context["invoice_no"])
            gst_demo.answer(engine.client, run_id, key, "meera",
                            queue[context["invoice_no"]].pop(0))
            asyncio.run(Runner(engine).run_until_idle())
        state = engine.state(run_id)
        history = [r.event for r in Journal(store).history("default", run_id)]
    finally:
        store.close()

    assert state.status == "completed"
    # One question per mismatch, asked again after each answer the mismatch does not allow.
    assert asked == ["MPH/0457", "SPC-88", "HJM/2024/0912", "HJM/2024/0912",
                     "HJM/2024/0912", "DS-19", "YFC/0629"]
    questions = [e for e in history if isinstance(e, ev.Escalated) and e.cause == "question"]
    answered = [e for e in history if isinstance(e, ev.EscalationAnswered)]
    assert len(questions) == len(answered) == 7
    assert {a.decision["approver_id"] for a in answered} == {"meera"}
    # The evidence travels with the question: both sides and every difference.
    first = questions[0].context
    assert isinstance(first, dict)
    assert first["books"]["taxable_value"] == "18000.00"
    assert first["gstr2b"]["taxable_value"] == "16000.00"
    assert [d["field"] for d in first["differences"]] == ["taxable_value", "igst"]
    assert first["allowed"] == ["claim", "defer", "reject"]
    missing = next(q.context for q in questions
                   if isinstance(q.context, dict) and q.context["kind"] == "missing_in_return")
    assert missing["gstr2b"] is None and missing["allowed"] == ["defer", "reject"]

    ledger = {e["invoice_no"]: e for e in Erp(tmp_path).entries()}
    assert len(Erp(tmp_path).entries()) == len(ledger) == 8
    assert {n: (e["decision"], e["by"]) for n, e in ledger.items()} == {
        "INV/24-25/101": ("claim", "matching"), "KC-2231": ("claim", "matching"),
        "YFC/0618": ("claim", "matching"), "MPH/0457": ("claim", "review"),
        "SPC-88": ("reject", "review"), "HJM/2024/0912": ("defer", "review"),
        "DS-19": ("defer", "review"), "YFC/0629": ("defer", "review"),
    }
    assert ledger["MPH/0457"]["itc"]["igst"] == "2880.00"  # what GSTR-2B supports
    assert ledger["KC-2231"]["itc"]["igst"] == "21600.40"
    assert all(Decimal(v) == 0 for n in ("SPC-88", "HJM/2024/0912", "DS-19", "YFC/0629")
               for v in ledger[n]["itc"].values())
    assert state.result["refused_answers"] == 2
    assert state.result["itc_claimed"] == {"igst": "25488.40", "cgst": "4500.00",
                                           "sgst": "4500.00", "cess": "0.00"}


def test_a_question_nobody_answers_in_time_holds_the_credit(tmp_path: Path) -> None:
    engine, clock = memory_engine([gst_reconciliation], make_tools(tmp_path))
    run_id, _ = engine.start(gst_reconciliation, {"period": "2024-06", "answer_within": 3600})
    asyncio.run(Runner(engine).run_until_idle())
    for _ in range(5):  # five mismatches, each left unanswered
        assert engine.client.pending_request(run_id) is not None
        clock.advance(3601)
        asyncio.run(Runner(engine).run_until_idle())
    state = engine.state(run_id)
    assert state.status == "completed"
    held = [e for e in Erp(tmp_path).entries() if e["by"] == "review"]
    assert len(held) == 5
    assert {e["decision"] for e in held} == {"defer"}
    assert {e["note"] for e in held} == {"no reviewer answered in time; credit held"}


def test_the_demo_runs_and_says_ok(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(DEMO), "--data", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "OK: every invoice booked once" in out
    assert "-> refused: not allowed for this mismatch; asked again" in out
    assert '"kind": "amount_mismatch"' in out  # the evidence, as the reviewer sees it
    assert len(Erp(tmp_path / "demo").entries()) == 8
