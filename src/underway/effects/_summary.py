"""One-line summaries of a call, for the person asked to approve it.

A tool declares a template (``@tool(summary="Pay {amount:money} to {supplier.name}")``).
Its fields are dotted paths into the call's arguments, nothing else: no attribute access,
no indexing by expression, no conversion, no format spec but ``money``. So a template
cannot reach into Python objects, and an argument cannot inject a field (values are
inserted as text, never formatted again). ``{amount:money}`` writes the value as money in
the currency the guard read for the call (:func:`~underway.money.format_money`).
"""

from __future__ import annotations

import json
import re
import string
from decimal import Decimal
from typing import Any

from ..errors import ConfigurationError
from ..events import JSON
from ..money import MISSING, Money, at_path, format_money

MAX_SUMMARY = 200
"""A summary longer than this many characters is cut (with ``…``)."""
MAX_VALUE = 80
"""An argument longer than this many characters is cut in a summary."""

_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")
_SPACE = re.compile(r"\s+")
_FORMATTER = string.Formatter()


def check_template(template: str, *, tool: str) -> None:
    """Refuse a template that is not plain text with ``{dotted.path}`` fields.

    Args:
        template: The summary template.
        tool: The tool's name, for the error.

    Raises:
        ConfigurationError: It is empty, malformed, or a field is not a plain path.
    """
    where = f"tool {tool!r}: summary template {template!r}"
    if not isinstance(template, str) or not template.strip():
        raise ConfigurationError(f"{where} must be a non-empty string")
    try:
        parts = list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise ConfigurationError(f"{where} is malformed: {exc}") from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if not _PATH.fullmatch(field):
            raise ConfigurationError(
                f"{where}: field {{{field}}} is not a dotted path of an argument "
                "(letters, digits, '_' and '.', such as {supplier.name})")
        if conversion is not None or spec not in ("", "money"):
            raise ConfigurationError(
                f"{where}: field {{{field}}} may carry no conversion and no format but "
                "':money'")


def render_summary(template: str, args: JSON, money: Money | None) -> str:
    """The summary of a call with ``args``, from a template :func:`check_template` passed.

    Args:
        template: The tool's summary template.
        args: The call's arguments.
        money: The money the guard read for the call, for ``:money`` fields.
    """
    out: list[str] = []
    for literal, field, spec, _ in _FORMATTER.parse(template):
        out.append(literal)
        if field is not None:
            out.append(_value(at_path(args, field), spec or "", money))
    return one_line("".join(out))


def one_line(text: str) -> str:
    """``text`` on one line (runs of white space made one space), at most
    :data:`MAX_SUMMARY` characters.

    Args:
        text: A summary.

    Raises:
        ConfigurationError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"a call's summary must be a string, not "
                                 f"{type(text).__name__}")
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MAX_SUMMARY else text[:MAX_SUMMARY - 1] + "…"


def _value(value: Any, spec: str, money: Money | None) -> str:
    if value is MISSING or value is None:
        return "?"
    if spec == "money" and money is not None:
        amount = _number(value)
        if amount is not None:
            return format_money(amount, money.currency)
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, int | float | Decimal):
        text = str(value)
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 1] + "…"


def _number(value: Any) -> Decimal | None:
    """``value`` as a finite number: a JSON number, or a decimal string (a ``Decimal``
    field's JSON form); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | Decimal):
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    elif isinstance(value, str):
        try:
            number = Decimal(value.strip())
        except ArithmeticError:
            return None
    else:
        return None
    return number if number.is_finite() else None


def argument_at(args: JSON, path: str) -> JSON:
    """The argument at dotted ``path`` in ``args`` (None when there is none).

    Args:
        args: A call's arguments.
        path: Dotted names (and list indices).
    """
    found = at_path(args, path)
    return None if found is MISSING else found
