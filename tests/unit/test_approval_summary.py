"""A call's one-line summary and money as people read it: tool templates are plain text
with argument paths (nothing reaches into objects, nothing an argument holds is formatted
again), and amounts are written in the currency's own locale."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.client._requests import money_words
from underway.errors import ConfigurationError
from underway.money import Money, format_money


@pytest.mark.parametrize(("amount", "currency", "shown"), [
    (Decimal("232000.00"), "INR", "₹2,32,000.00"),
    (Decimal("12345678.5"), "INR", "₹1,23,45,678.50"),
    (999, "INR", "₹999.00"),
    (1234.5, "USD", "$1,234.50"),
    (Decimal("1234567.891"), "USD", "$1,234,567.891"),  # a digit it has is never dropped
    (Decimal("-1234.5"), "EUR", "-€1,234.50"),
    (Decimal("1000"), "GBP", "£1,000.00"),
    (Decimal("1500"), "JPY", "¥1,500"),
    (Decimal("12.5"), "KWD", "KWD\u00a012.500"),
    (5, "XYZ", "5.00\u00a0XYZ"),
    (Decimal("0"), "inr", "₹0.00"),
])
def test_money_is_written_in_the_currencys_locale(amount: Any, currency: str,
                                                  shown: str) -> None:
    assert format_money(amount, currency) == shown


def test_money_words_name_the_way_and_the_account() -> None:
    out = {"amount": "232000.00", "currency": "INR", "direction": "out",
           "account": "HDFC-OPS-0042"}
    assert money_words(out) == "moves ₹2,32,000.00 out of HDFC-OPS-0042"
    assert money_words({**out, "direction": "in"}) == "moves ₹2,32,000.00 into HDFC-OPS-0042"
    assert money_words({**out, "account": None}) == "pays out ₹2,32,000.00"
    assert money_words({**out, "direction": "both", "account": None}) == "moves ₹2,32,000.00"
    assert money_words(None) is None
    assert money_words({"amount": "lots", "currency": "INR"}) is None


def _tool(summary: str) -> uw.Tool[Any, Any]:
    async def fn(args: dict[str, Any]) -> None:
        return None
    return uw.tool(fn, name="pay", summary=summary)


def test_a_template_fills_dotted_paths_of_the_arguments() -> None:
    t = uw.tool(_pay, name="pay", amount="amount", currency="arg:currency",
                summary="Pay {amount:money} to {supplier.name} ({lines.0.sku}), {note}")
    args = {"amount": 232000, "currency": "INR", "supplier": {"name": "Shakti"},
            "lines": [{"sku": "STEEL-8"}], "note": "multi\n  line   note"}
    money = t.money(args)
    assert isinstance(money, Money)
    assert t.summary_of(args, money) == "Pay ₹2,32,000.00 to Shakti (STEEL-8), multi line note"
    # A missing argument reads "?"; a value is inserted as text, never formatted again.
    assert t.summary_of({**args, "supplier": {}, "note": "{amount} {0.__class__}"}, money) \
        == "Pay ₹2,32,000.00 to ? (STEEL-8), {amount} {0.__class__}"
    long = t.summary_of({**args, "note": "x" * 500}, money)
    assert long is not None and len(long) <= 200 and long.endswith("…")


async def _pay(args: dict[str, Any]) -> None:
    return None


@pytest.mark.parametrize("template", [
    "{amount.__class__.__mro__[1]}", "{0}", "{}", "{a[0]}", "{a!r}", "{a:>10}",
    "{a:{b}}", "{a", "}", "   ", "{a.}", "{a-b}",
])
def test_a_template_that_could_reach_further_is_refused(template: str) -> None:
    with pytest.raises(ConfigurationError, match="summary template"):
        _tool(template)


class Order(BaseModel):
    amount: Decimal
    po: str


async def _order(args: Order) -> None:
    return None


def test_an_account_must_name_an_argument_the_model_has() -> None:
    with pytest.raises(ConfigurationError, match="'from_account'"):
        uw.tool(_order, amount="amount", currency="INR", account="from_account")
    t = uw.tool(_order, amount="amount", currency="INR", account="po", summary="PO {po}")
    assert t.account_of({"amount": 5, "po": "PO-7"}) == "PO-7"
