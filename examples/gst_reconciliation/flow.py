"""The GST reconciliation agent: books against GSTR-2B, credit taken only on what matches,
and every mismatch put to a person with the evidence.

Steps::

    load -> post_matched -> review -> review -> ... -> done

``load`` fetches the purchase register (the ERP) and GSTR-2B (a GSP) — both read-only —
and matches them (:mod:`.matching`). ``post_matched`` books input tax credit for each
matched invoice: the credit GSTR-2B supports, no person needed. ``review`` asks a person
with the ``gst_reviewer`` role about one mismatch at a time (``ctx.ask``: the run
escalates, holding no worker, until a signed answer arrives), the question's context being
the evidence — both sides' lines, every difference, the GSTIN check — and books what they
decided. An answer the mismatch does not allow (credit on an invoice the supplier never
reported) is refused and the question asked again; a question nobody answers within the
time allowed defers the credit.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from underway import CallInfo, Flow, RunContext, Tool, tool
from underway.errors import ToolCallError
from underway.flow import Next

from .matching import Finding, Purchase, Reported, Taxes, reconcile
from .systems import Erp, Gsp, reported_lines

Decision = Literal["claim", "defer", "reject"]

ALLOWED: dict[str, tuple[Decision, ...]] = {
    "amount_mismatch": ("claim", "defer", "reject"),
    "tax_mismatch": ("claim", "defer", "reject"),
    "itc_unavailable": ("defer", "reject"),
    "missing_in_return": ("defer", "reject"),
    "invalid_gstin": ("defer", "reject"),
    "duplicate_in_books": ("defer", "reject"),
    "missing_in_books": ("defer", "reject"),
}
"""What a reviewer may decide for each kind of mismatch. ``claim`` takes the credit the
return supports, and only where the return holds the invoice under a valid GSTIN with
credit available (CGST Act s. 16(2)(aa)); ``defer`` holds it until the supplier or the
books are corrected; ``reject`` records that no credit will be taken."""

REVIEWER = "gst_reviewer"
"""The role whose members review mismatches."""


# -- input, state, tool payloads ------------------------------------------------------------


class GstInput(BaseModel):
    """A reconciliation of one return period."""

    period: str = Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$", description="YYYY-MM")
    tolerance: Decimal = Field(default=Decimal("1.00"), ge=0,
                               description="INR by which amounts may differ (rounding)")
    answer_within: float = Field(default=7 * 86_400, gt=0,
                                 description="seconds a reviewer has to answer")


class Booked(BaseModel):
    """What was booked for one invoice."""

    supplier_gstin: str
    invoice_no: str
    kind: str
    decision: Decision
    itc: Taxes
    by: str
    """``matching`` (booked on a match) or ``review`` (a person decided)."""
    note: str = ""


class GstState(BaseModel):
    """The matching's result, where the review stands, and what was booked."""

    matched: list[Finding] = []
    flagged: list[Finding] = []
    position: int = 0
    refused_answers: int = 0
    booked: list[Booked] = []


class Period(BaseModel):
    """Arguments of the two read-only tools."""

    model_config = ConfigDict(extra="forbid")
    period: str


class Register(BaseModel):
    """The purchase register of a period."""

    purchases: list[Purchase]


class Return2B(BaseModel):
    """GSTR-2B of a period, one line per invoice."""

    lines: list[Reported]


class LedgerEntry(BaseModel):
    """Arguments of ``post_itc``: one line of the ITC ledger."""

    model_config = ConfigDict(extra="forbid")
    period: str
    supplier_gstin: str
    invoice_no: str
    kind: str
    decision: Decision
    itc: Taxes
    by: str
    note: str = ""


class Review(BaseModel):
    """A reviewer's answer."""

    model_config = ConfigDict(extra="forbid")
    decision: Decision
    note: str = ""


# -- tools ------------------------------------------------------------------------------------


def make_tools(data: Path) -> list[Tool]:
    """The agent's tools: the ERP and the GSP, with the ledger kept under ``data``."""
    erp, gsp = Erp(data), Gsp()

    @tool(read_only=True, timeout=30)
    def fetch_purchase_register(args: Period) -> Register:
        """The purchases booked in a period."""
        return Register(purchases=erp.purchases(args.period))

    @tool(read_only=True, timeout=30)
    def fetch_gstr2b(args: Period) -> Return2B:
        """GSTR-2B of a period, from the GSP."""
        return Return2B(lines=reported_lines(gsp.gstr2b(args.period)))

    @tool(idempotent=True, timeout=30)
    def post_itc(entry: LedgerEntry, call: CallInfo) -> LedgerEntry:
        """Book a decision on one invoice's credit in the ITC ledger (once per key)."""
        booked = erp.post(call.key, entry.model_dump(mode="json"))
        return LedgerEntry.model_validate({k: v for k, v in booked.items() if k != "key"})

    return [fetch_purchase_register, fetch_gstr2b, post_itc]


# -- the flow ---------------------------------------------------------------------------------

gst_reconciliation: Flow[GstState, GstInput] = Flow(
    "gst_reconciliation", state=GstState, input=GstInput,
    tools=["fetch_purchase_register", "fetch_gstr2b", "post_itc"],
)
Ctx = RunContext[GstState, GstInput]


@gst_reconciliation.step(start=True)
async def load(ctx: Ctx) -> Next:
    """Fetch both sides and match them."""
    period = Period(period=ctx.input.period)
    books = Register.model_validate(await ctx.call("fetch_purchase_register", period))
    returned = Return2B.model_validate(await ctx.call("fetch_gstr2b", period))
    found = reconcile(books.purchases, returned.lines, tolerance=ctx.input.tolerance)
    ctx.state.matched, ctx.state.flagged = list(found.matched), list(found.flagged)
    return ctx.goto(post_matched)


@gst_reconciliation.step
async def post_matched(ctx: Ctx) -> Next:
    """Book the credit of every matched invoice."""
    for finding in ctx.state.matched:
        await _book(ctx, finding, "claim", by="matching")
    return ctx.goto(review)


@gst_reconciliation.step
async def review(ctx: Ctx) -> Next:
    """Put the next mismatch to a reviewer, and book what they decide."""
    if ctx.state.position >= len(ctx.state.flagged):
        return ctx.done(summary(ctx.state))
    finding = ctx.state.flagged[ctx.state.position]
    allowed = ALLOWED[finding.kind]
    try:
        answer = await ctx.ask(question(finding, allowed), context=evidence(finding, allowed),
                               role=REVIEWER, expires_in=ctx.input.answer_within)
    except ToolCallError as exc:
        if exc.error_type != "QuestionExpired":
            raise
        await _book(ctx, finding, "defer", by="review",
                    note="no reviewer answered in time; credit held")
        return _next(ctx)
    try:
        decided = Review.model_validate(answer)
    except ValidationError:
        decided = None
    if decided is None or decided.decision not in allowed:
        ctx.state.refused_answers += 1
        return ctx.goto(review)  # ask again: a new question, on the same evidence
    await _book(ctx, finding, decided.decision, by="review", note=decided.note)
    return _next(ctx)


def _next(ctx: Ctx) -> Next:
    ctx.state.position += 1
    return ctx.goto(review)


async def _book(ctx: Ctx, finding: Finding, decision: Decision, *, by: str,
                note: str = "") -> None:
    itc = finding.itc if decision == "claim" else Taxes()
    entry = LedgerEntry(period=ctx.input.period, supplier_gstin=finding.supplier_gstin,
                        invoice_no=finding.invoice_no, kind=finding.kind, decision=decision,
                        itc=itc, by=by, note=note)
    await ctx.call("post_itc", entry)
    ctx.state.booked.append(Booked(**entry.model_dump(exclude={"period"})))


def question(finding: Finding, allowed: tuple[Decision, ...]) -> str:
    """What the reviewer is asked about one mismatch."""
    who = finding.books.supplier if finding.books else (
        finding.reported.supplier if finding.reported else finding.supplier_gstin)
    return (f"GST mismatch ({finding.kind.replace('_', ' ')}) on invoice "
            f"{finding.invoice_no} from {who}: {finding.problem}. Decide: "
            f"{', '.join(allowed)}.")


def evidence(finding: Finding, allowed: tuple[Decision, ...]) -> dict[str, Any]:
    """The question's context: what each side says and how they differ."""
    return {
        "kind": finding.kind,
        "supplier_gstin": finding.supplier_gstin,
        "invoice_no": finding.invoice_no,
        "books": finding.books.model_dump(mode="json") if finding.books else None,
        "gstr2b": finding.reported.model_dump(mode="json") if finding.reported else None,
        "differences": [{"field": d.field, "books": str(d.books),
                         "gstr2b": str(d.reported), "by": str(d.by)}
                        for d in finding.differences],
        "credit_supported": finding.itc.model_dump(mode="json"),
        "allowed": list(allowed),
        "answer_with": {"decision": "|".join(allowed), "note": "why (optional)"},
    }


def summary(state: GstState) -> dict[str, Any]:
    """The run's result: counts, and the credit booked by head."""
    claimed = [b for b in state.booked if b.decision == "claim"]
    return {
        "matched": len(state.matched),
        "reviewed": len(state.flagged),
        "refused_answers": state.refused_answers,
        "decisions": {d: sum(1 for b in state.booked if b.decision == d)
                      for d in ("claim", "defer", "reject")},
        "itc_claimed": {h: str(sum((getattr(b.itc, h) for b in claimed), Decimal(0)))
                        for h in ("igst", "cgst", "sgst", "cess")},
    }
