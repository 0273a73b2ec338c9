"""The money a tool call moves, read once and the same way for everything that counts it.

A tool declares where its amount sits in its arguments (``@tool(amount="amount",
currency="INR")`` or ``currency="arg:currency"``) and, optionally, which way the money
goes (``money_direction``). :func:`read_money` is the only reader: policy decisions,
budgets, the usage journaled with each call and ``underway policy explain`` all use it.
It returns a :class:`Money`, :data:`None` for a call that moves no money, or an
:class:`Unreadable` that says which argument could not be read and why; the guard turns
an :class:`Unreadable` into a journaled deny, so no rule or budget is ever skipped because
an amount was missing, defaulted, negative, NaN, infinite, a string or a boolean.

The arguments are read as the tool will see them: validated by its argument model, with
the model's defaults filled in (so ``currency: str = "INR"`` counts as INR). A model
field typed ``float``, ``int`` or ``Decimal`` coerces ``"25000"`` to a number before the
tool runs, so the guard counts that number; a value that is still a string after
validation (an untyped tool, a ``str`` field) is refused, because the guard will not guess
how the tool parses it. A boolean is refused even where the model would coerce it to 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from .events import JSON

__all__ = [
    "MAX_AMOUNT", "Direction", "Money", "Unreadable", "format_money", "read_money",
    "valid_currency",
]

Direction = Literal["out", "in", "both"]
"""Which way a tool moves money: ``out`` (it pays), ``in`` (it collects) or ``both`` (the
sign of the amount says; the default)."""

MAX_AMOUNT = Decimal(10) ** 15
"""The largest amount counted. Usage is journaled as floating-point numbers, which hold
every whole number up to about 9·10¹⁵ exactly; a larger amount is refused rather than
counted approximately (or as infinity)."""

_CURRENCY = re.compile(r"[A-Z]{3}")


class MoneyDeclaration(Protocol):
    """Where a tool's money sits in its arguments (a :class:`~underway.effects.Tool` is
    one): what :func:`read_money` reads, without this module depending on tools."""

    @property
    def name(self) -> str:
        """The tool's name."""
        ...

    @property
    def args_model(self) -> type[BaseModel] | None:
        """The schema its arguments are validated with."""
        ...

    @property
    def amount(self) -> str | None:
        """Dotted path of the argument holding the amount."""
        ...

    @property
    def currency(self) -> str | None:
        """The currency code, or ``arg:<path>`` of the argument holding it."""
        ...

    @property
    def money_direction(self) -> Direction:
        """Which way the money moves."""
        ...


def valid_currency(code: object) -> str | None:
    """``code`` as an upper-case three-letter code (``" inr "`` is ``INR``), or None when
    it is not one. ASCII letters only, so look-alike characters cannot open a currency
    that no rule or budget names."""
    if not isinstance(code, str):
        return None
    code = code.strip().upper()
    return code if _CURRENCY.fullmatch(code) else None


@dataclass(frozen=True, slots=True)
class Money:
    """Money one call moves: ``amount`` as its arguments give it (sign included, as a
    :class:`~decimal.Decimal`), in ``currency``, the way the tool declares it moves money.

    :attr:`exposure` is what limits and rules count: the size of the amount, whichever
    way it moves.
    """

    currency: str
    amount: Decimal
    direction: Direction = "both"

    @property
    def exposure(self) -> Decimal:
        """How much money moves, whatever the direction: never negative (``-0`` is 0)."""
        return self.amount.copy_abs()

    def counted(self) -> float:
        """:attr:`exposure` as the float journaled in usage counts."""
        return float(self.exposure)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """The money a call moves cannot be read: ``field`` is the argument path (or
    ``arguments`` when they do not validate), ``value`` the repr of what was found and
    ``problem`` what is wrong with it. The guard refuses such a call; ``str()`` is the
    reason it journals."""

    tool: str
    field: str
    value: str
    problem: str

    def __str__(self) -> str:
        return (
            f"the money this call of {self.tool!r} moves cannot be counted: argument "
            f"{self.field!r} is {self.value}, {self.problem}; the call is denied"
        )


MISSING: Any = object()
"""What :func:`at_path` gives for a path the value does not hold."""


def read_money(
    tool: MoneyDeclaration, args: JSON, *, validated: BaseModel | None = None
) -> Money | Unreadable | None:
    """The money a call of ``tool`` with ``args`` moves. Never raises.

    Args:
        tool: The tool's money declaration.
        args: The call's arguments.
        validated: ``args`` already validated by the tool's argument model, when the caller
            has it.

    Returns:
        :class:`Money`, None when the tool declares no amount, or :class:`Unreadable`.
    """
    if tool.amount is None or tool.currency is None:
        return None
    checked: Any = args
    if validated is not None:
        checked = _python_value(validated)
    elif tool.args_model is not None:
        try:
            checked = _python_value(tool.args_model.model_validate(args))
        except ValidationError as exc:
            n = exc.error_count()
            return Unreadable(tool.name, "arguments", "invalid",
                              f"not matching the tool's schema ({n} error{'s' * (n != 1)})")
    raw = at_path(args, tool.amount)
    if isinstance(raw, bool):
        return Unreadable(tool.name, tool.amount, _shown(raw), "a boolean, not an amount")
    amount = _amount(tool, at_path(checked, tool.amount))
    if isinstance(amount, Unreadable):
        return amount
    if tool.currency.startswith("arg:"):
        path = tool.currency[4:]
        found = at_path(checked, path)
        currency = valid_currency(found)
        if currency is None:
            if found is MISSING or found is None:
                return Unreadable(tool.name, path, "missing" if found is MISSING else "None",
                                  "and the tool reads the currency of its amount there")
            return Unreadable(tool.name, path, _shown(found),
                              "not a three-letter currency code such as 'INR'")
    else:
        currency = tool.currency
    return Money(currency, amount, tool.money_direction)


def _amount(tool: MoneyDeclaration, value: Any) -> Decimal | Unreadable:
    path = tool.amount or ""

    def bad(shown: str, problem: str) -> Unreadable:
        return Unreadable(tool.name, path, shown, problem)

    if value is MISSING or value is None:
        return bad("missing" if value is MISSING else "None",
                   "and a call of a tool that moves money must say how much")
    if isinstance(value, bool):
        return bad(_shown(value), "a boolean, not an amount")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, float | Decimal):
        amount = Decimal(repr(value)) if isinstance(value, float) else value
        if not amount.is_finite():
            return bad(_shown(value), "not a finite number")
    elif isinstance(value, str):
        return bad(_shown(value), "a string; declare the field as a number (Decimal) in the "
                   "tool's argument model so it is validated before the guard counts it")
    else:
        return bad(f"a {type(value).__name__}", "not a number")
    if amount.copy_abs() > MAX_AMOUNT:
        return bad(_shown(value), f"larger than {MAX_AMOUNT:,} and cannot be counted exactly")
    if amount < 0 and tool.money_direction != "both":
        return bad(_shown(value), f"negative, but tool {tool.name!r} only moves money "
                   f"{tool.money_direction}")
    return amount.copy_abs() if amount == 0 else amount


def _shown(value: Any) -> str:
    """``value`` as a refusal names it: strings quoted, numbers plain, long ones cut."""
    text = str(value) if isinstance(value, Decimal) else repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _python_value(model: BaseModel) -> Any:
    """The validated arguments as plain containers, keyed as the caller spells them
    (aliases), keeping numbers as the model typed them (a Decimal stays a Decimal)."""
    return model.model_dump(by_alias=True)


def at_path(value: Any, path: str) -> Any:
    """What ``value`` holds at a dotted path of names and list indices, or
    :data:`MISSING`.

    Args:
        value: Plain containers: a call's arguments.
        path: Dotted names (and list indices).
    """
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part, MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


# -- money as people read it -------------------------------------------------------------
# Symbol, minor digits and grouping as CLDR's English locale of the currency's home country
# writes them (en_IN for INR, en_US for USD...). A small table rather than Babel: the
# console needs a symbol, a digit count and one of two groupings, not 30 MB of locale data.
_STYLE: dict[str, tuple[str, int]] = {
    "INR": ("₹", 2), "USD": ("$", 2), "EUR": ("€", 2), "GBP": ("£", 2), "JPY": ("¥", 0),
    "CNY": ("CN¥", 2), "AUD": ("A$", 2), "CAD": ("CA$", 2), "SGD": ("SGD\u00a0", 2),
    "CHF": ("CHF\u00a0", 2), "AED": ("AED\u00a0", 2), "HKD": ("HK$", 2), "NZD": ("NZ$", 2),
    "KRW": ("₩", 0), "BRL": ("R$", 2), "MXN": ("MX$", 2), "ZAR": ("ZAR\u00a0", 2),
    "NPR": ("NPR\u00a0", 2), "LKR": ("LKR\u00a0", 2), "BDT": ("BDT\u00a0", 2),
    "PKR": ("PKR\u00a0", 2), "KWD": ("KWD\u00a0", 3), "BHD": ("BHD\u00a0", 3),
    "OMR": ("OMR\u00a0", 3),
}
_LAKH = frozenset({"INR", "NPR", "LKR", "BDT", "PKR"})
"""Currencies whose home locales group digits in lakhs and crores (2,32,000)."""


def format_money(amount: Decimal | float | int, currency: str) -> str:
    """``amount`` written as money in ``currency``'s own locale: ``₹2,32,000.00`` (Indian
    grouping), ``$1,234.50``, ``€1,234.50``, ``¥1,235``... A currency not in the table
    reads ``1,234.50 XYZ``. Never rounds away a digit the amount has: ``$0.005`` stays.

    Args:
        amount: How much (its sign is kept).
        currency: A three-letter code.
    """
    code = valid_currency(currency) or str(currency)
    value = amount if isinstance(amount, Decimal) else Decimal(
        repr(amount) if isinstance(amount, float) else amount)
    if not value.is_finite():
        return f"{value} {code}"
    symbol, digits = _STYLE.get(code, ("", 2))
    sign = "-" if value < 0 else ""
    text = format(value.copy_abs(), "f")
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0").ljust(digits, "0")
    grouped = _group(whole, lakh=code in _LAKH)
    number = f"{grouped}.{fraction}" if fraction else grouped
    return f"{sign}{symbol}{number}" if symbol else f"{sign}{number}\u00a0{code}"


def _group(digits: str, *, lakh: bool) -> str:
    if len(digits) <= 3:
        return digits
    head, tail = digits[:-3], digits[-3:]
    size = 2 if lakh else 3
    parts: list[str] = []
    while len(head) > size:
        parts.insert(0, head[-size:])
        head = head[:-size]
    return ",".join([head, *parts, tail])
