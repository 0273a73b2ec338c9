"""Matching a purchase register against GSTR-2B: pure functions, no I/O.

A purchase (a line of the books) and a line of the return are the same invoice when their
supplier GSTIN and invoice number match — the number compared without case, spaces, ``/``,
``-`` or ``.``, which suppliers and accountants write differently (``INV/24-25/007`` and
``inv 24-25 007`` are one invoice). Amounts match when every one — taxable value, IGST,
CGST, SGST, cess — differs by at most the tolerance (rounding).

What does not match is a :class:`Finding` for a person, with what each side says:

================================  ==================================================
``invalid_gstin``                 the books hold a GSTIN that is not well formed
``duplicate_in_books``            the same supplier invoice booked twice
``missing_in_return``             booked, but the supplier has not reported it
``amount_mismatch``               the taxable value differs (the taxes usually follow)
``tax_mismatch``                  the value agrees but a tax head differs (a rate, or
                                  IGST where CGST and SGST were due: place of supply)
``itc_unavailable``               reported, but the return says no credit is available
``missing_in_books``              the supplier reported an invoice nobody booked
================================  ==================================================
"""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .gstin import InvalidGstin, parse

FindingKind = Literal["matched", "invalid_gstin", "duplicate_in_books", "missing_in_return",
                      "amount_mismatch", "tax_mismatch", "itc_unavailable",
                      "missing_in_books"]

HEADS = ("igst", "cgst", "sgst", "cess")
"""The tax heads of an invoice."""

_SEPARATORS = re.compile(r"[\s/\-.]+")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Taxes(_Frozen):
    """The tax on an invoice, by head (INR)."""

    igst: Decimal = Decimal("0.00")
    cgst: Decimal = Decimal("0.00")
    sgst: Decimal = Decimal("0.00")
    cess: Decimal = Decimal("0.00")

    @property
    def total(self) -> Decimal:
        """All heads together."""
        return self.igst + self.cgst + self.sgst + self.cess


class Purchase(_Frozen):
    """A line of the purchase register: a supplier's invoice as it was booked."""

    supplier_gstin: str
    supplier: str
    invoice_no: str
    invoice_date: date
    taxable_value: Decimal
    taxes: Taxes


class Reported(_Frozen):
    """A line of GSTR-2B: a supplier's invoice as the supplier reported it (GSTR-1)."""

    supplier_gstin: str
    supplier: str
    invoice_no: str
    invoice_date: date
    taxable_value: Decimal
    taxes: Taxes
    itc_available: bool = True
    reason: str = ""
    """Why credit is not available, when it is not (GSTR-2B's ``rsn``)."""


class Difference(_Frozen):
    """One amount on which the two sides disagree."""

    field: str
    books: Decimal
    reported: Decimal

    @property
    def by(self) -> Decimal:
        """Books minus return."""
        return self.books - self.reported


class Finding(_Frozen):
    """What the matching found for one invoice: a match, or a problem for a person."""

    kind: FindingKind
    supplier_gstin: str
    invoice_no: str
    books: Purchase | None = None
    reported: Reported | None = None
    differences: tuple[Difference, ...] = ()
    problem: str = ""
    """What is wrong, in a sentence (empty for a match)."""

    @property
    def itc(self) -> Taxes:
        """The credit the return supports: what the supplier reported (nothing when the
        invoice is not in the return)."""
        return self.reported.taxes if self.reported is not None else Taxes()


class Reconciliation(_Frozen):
    """Every invoice of both sides, matched or found wanting."""

    matched: tuple[Finding, ...]
    flagged: tuple[Finding, ...]


def invoice_key(gstin: str, invoice_no: str) -> str:
    """How an invoice is matched: its supplier's GSTIN and its number without case or
    separators."""
    return f"{gstin.strip().upper()}|{_SEPARATORS.sub('', invoice_no).upper()}"


def reconcile(books: list[Purchase], returned: list[Reported], *,
              tolerance: Decimal = Decimal("1.00")) -> Reconciliation:
    """Match ``books`` against ``returned``, amounts within ``tolerance`` (INR) agreeing."""
    if tolerance < 0:
        raise ValueError(f"tolerance must not be negative, not {tolerance}")
    reported: dict[str, Reported] = {}
    for line in returned:
        reported.setdefault(invoice_key(line.supplier_gstin, line.invoice_no), line)
    matched: list[Finding] = []
    flagged: list[Finding] = []
    booked: set[str] = set()
    for purchase in books:
        finding = _match(purchase, reported, booked, tolerance)
        (matched if finding.kind == "matched" else flagged).append(finding)
    # A mistyped GSTIN in the books: the supplier reported the invoice under its real one.
    for n, finding in enumerate(flagged):
        if finding.kind == "invalid_gstin":
            number = invoice_key("", finding.invoice_no)
            candidate = next((k for k in reported if k.endswith(number)), None)
            if candidate is not None:
                line = reported.pop(candidate)
                flagged[n] = finding.model_copy(update={
                    "reported": line,
                    "problem": f"{finding.problem}; the return holds invoice "
                               f"{line.invoice_no} from {line.supplier_gstin} "
                               f"({line.supplier}): the GSTIN was probably mistyped"})
    for line in reported.values():
        flagged.append(Finding(
            kind="missing_in_books", supplier_gstin=line.supplier_gstin,
            invoice_no=line.invoice_no, reported=line,
            problem=f"{line.supplier} reported invoice {line.invoice_no} of "
                    f"{line.invoice_date} ({line.taxable_value} INR taxable), which is not "
                    "in the purchase register"))
    return Reconciliation(matched=tuple(matched), flagged=tuple(flagged))


def _match(purchase: Purchase, reported: dict[str, Reported], booked: set[str],
           tolerance: Decimal) -> Finding:
    base = {"supplier_gstin": purchase.supplier_gstin, "invoice_no": purchase.invoice_no,
            "books": purchase}
    try:
        parse(purchase.supplier_gstin)
    except InvalidGstin as exc:
        return Finding(kind="invalid_gstin", **base,
                       problem=f"the supplier GSTIN in the books is not valid: {exc}")
    key = invoice_key(purchase.supplier_gstin, purchase.invoice_no)
    if key in booked:
        return Finding(kind="duplicate_in_books", **base,
                       problem=f"invoice {purchase.invoice_no} of {purchase.supplier} is "
                               "booked more than once")
    booked.add(key)
    line = reported.pop(key, None)
    if line is None:
        return Finding(kind="missing_in_return", **base,
                       problem=f"{purchase.supplier} has not reported invoice "
                               f"{purchase.invoice_no} in GSTR-2B: no credit can be taken "
                               "on it yet")
    pairs = [("taxable_value", purchase.taxable_value, line.taxable_value)]
    pairs += [(h, getattr(purchase.taxes, h), getattr(line.taxes, h)) for h in HEADS]
    differences = tuple(Difference(field=f, books=b, reported=r) for f, b, r in pairs
                        if abs(b - r) > tolerance)
    found = {**base, "reported": line, "differences": differences}
    if any(d.field == "taxable_value" for d in differences):
        return Finding(kind="amount_mismatch", **found,
                       problem="the taxable value differs: " + _say(differences))
    if differences:
        heads = ("IGST" if purchase.taxes.igst else "CGST and SGST",
                 "IGST" if line.taxes.igst else "CGST and SGST")
        where = (f" ({heads[0]} in the books, {heads[1]} in the return: the place of "
                 "supply differs)" if heads[0] != heads[1] else "")
        return Finding(kind="tax_mismatch", **found,
                       problem="the tax differs: " + _say(differences) + where)
    if not line.itc_available:
        return Finding(kind="itc_unavailable", **found,
                       problem="GSTR-2B says no credit is available on this invoice"
                               + (f" ({line.reason})" if line.reason else ""))
    return Finding(kind="matched", **found)


def _say(differences: tuple[Difference, ...]) -> str:
    return "; ".join(f"{d.field} {d.books} in the books, {d.reported} in the return"
                     for d in differences)
