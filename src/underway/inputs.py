"""Checks of outside input, made where it enters: text a database can hold, finite
numbers, and JSON parsed strictly. Each refusal is an :class:`InvalidInput` naming the
field, raised before anything is stored.

- :func:`text`: no NUL (PostgreSQL cannot store it), no lone surrogate (UTF-8 cannot
  encode it), at most a length.
- :func:`number`: finite (NaN and infinities have no JSON form, and NaN equals nothing).
- :func:`when`: a time a date can show (0 to :data:`MAX_TIME`).
- :func:`integer`: fits a signed 64-bit column.
- :func:`json_value`: a decoded JSON value whose strings, keys and numbers all pass the
  checks above, nested at most :data:`MAX_DEPTH` deep.
- :func:`parse_json`: JSON text decoded without ``NaN``, ``Infinity`` or numbers that
  overflow to them, then checked as :func:`json_value` (a too-deep document is refused
  without recursing into it).

>>> parse_json("body", '{"a": NaN}')
Traceback (most recent call last):
...
underway.errors.InvalidInput: body.a: not a finite number (NaN and infinities are not JSON)
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import ValidationError

from .errors import FieldProblem, InvalidInput

__all__ = [
    "MAX_DEPTH",
    "MAX_INT",
    "MAX_NAME",
    "MAX_TEXT",
    "MAX_TIME",
    "InvalidInput",
    "integer",
    "invalid_model_input",
    "json_value",
    "number",
    "parse_json",
    "text",
    "when",
]

MAX_DEPTH = 64
"""How deep arrays and objects may nest in a JSON value from outside."""
MAX_TEXT = 100_000
"""The longest single string :func:`text` takes unless told otherwise."""
MAX_INT = 2**63 - 1
"""The largest integer a database column takes (signed 64-bit)."""
MAX_TIME = 253_402_300_799.0
"""The latest time a run may name (epoch seconds): 9999-12-31 23:59:59 UTC, the last a
date can show."""
MAX_NAME = 2000
"""The longest id or name taken from outside (a run id, a signal id, a queue, a query
parameter)."""

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_NOT_FINITE = "not a finite number (NaN and infinities are not JSON)"


def _printable(key: str) -> str:
    """``key`` as a field's name may show it: at most 100 characters, what cannot be
    encoded escaped (``\\udfff``, ``\\x00``)."""
    key = key[:100]
    if _BAD_CHAR.search(key) is None:
        return key
    return key.encode("unicode_escape", "backslashreplace").decode("ascii")


class _NotFinite:
    """Where the document had NaN, Infinity or a number too large for a float."""


_NAN = _NotFinite()


def _constant(name: str) -> _NotFinite:
    return _NAN


def _float(literal: str) -> float | _NotFinite:
    value = float(literal)
    return value if math.isfinite(value) else _NAN


def text(field: str, value: str, *, max_length: int | None = MAX_TEXT) -> str:
    """``value`` when it holds no NUL and no lone surrogate and is not too long.

    Args:
        field: Where the value is, for the error.
        value: The text.
        max_length: The most characters allowed; None allows any length.

    Raises:
        InvalidInput: The text is refused; it names ``field``.
    """
    found = _BAD_CHAR.search(value)
    if found is not None:
        what = "a NUL character" if found.group() == "\x00" else "a lone surrogate"
        raise InvalidInput(field, f"holds {what} (at index {found.start()}), which cannot "
                           "be stored")
    if max_length is not None and len(value) > max_length:
        raise InvalidInput(field, f"is {len(value)} characters long; at most {max_length}")
    return value


def number(field: str, value: float) -> float:
    """``value`` when it is finite; else :class:`InvalidInput` naming ``field``."""
    if not math.isfinite(value):
        raise InvalidInput(field, _NOT_FINITE)
    return value


def when(field: str, value: float) -> float:
    """``value`` when it is a time a date can show (epoch seconds from 0 to
    :data:`MAX_TIME`); else :class:`InvalidInput` naming ``field``."""
    number(field, value)
    if not 0 <= value <= MAX_TIME:
        raise InvalidInput(field, f"must be a time in epoch seconds from 0 to {MAX_TIME:.0f} "
                           f"(9999-12-31), not {value!r}")
    return value


def integer(field: str, value: int, *, minimum: int = -MAX_INT - 1,
            maximum: int = MAX_INT) -> int:
    """``value`` when ``minimum <= value <= maximum``.

    Args:
        field: Where the value is, for the error.
        value: The number.
        minimum: The least allowed; by default, what a signed 64-bit column holds.
        maximum: The most allowed; by default, what a signed 64-bit column holds.

    Raises:
        InvalidInput: The number is out of range; it names ``field``.
    """
    if not minimum <= value <= maximum:
        raise InvalidInput(field, f"must be between {minimum} and {maximum}, not {value}")
    return value


def json_value(field: str, value: Any, *, max_depth: int = MAX_DEPTH) -> Any:
    """``value`` when every part of it can be stored as JSON.

    Every string and key must pass :func:`text`. Strings may be of any length, keys of at
    most :data:`MAX_NAME`. Every float must be finite.

    Args:
        field: Where the value is, for the error.
        value: Decoded JSON, or what a caller would encode as JSON.
        max_depth: The deepest nesting allowed.

    Raises:
        InvalidInput: A part is refused; it names the path to the first bad part
            (``field.key.0``).
    """
    # An explicit stack: a hostile value must not exhaust the interpreter's recursion.
    stack: list[tuple[str, Any, int]] = [(field, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, str):
            text(where, item, max_length=None)  # a document's size is the body's limit
        elif item is _NAN:
            raise InvalidInput(where, _NOT_FINITE)
        elif isinstance(item, float):
            number(where, item)
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                raise InvalidInput(where, f"nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, inner in item.items():
                    name = f"{where}.{_printable(str(key))}"
                    if isinstance(key, str):
                        text(name, key, max_length=MAX_NAME)
                    stack.append((name, inner, depth + 1))
            else:
                stack.extend((f"{where}.{i}", inner, depth + 1)
                             for i, inner in enumerate(item))
    return value


def parse_json(field: str, data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document ``data`` decoded and checked by :func:`json_value`.

    Refused: text that is not JSON or not UTF-8, ``NaN``, ``Infinity``, a number that
    overflows a float (``1e309``), a NUL or lone surrogate in a string. So is a document
    nested deeper than ``max_depth``.

    Args:
        field: Where the document is, for the error.
        data: The document.
        max_depth: The deepest nesting allowed.

    Raises:
        InvalidInput: The document is refused; it names the path to the bad part. Its
            ``status`` is 400 when the document is not JSON at all.
    """
    try:
        value = json.loads(data, parse_constant=_constant, parse_float=_float)
    except RecursionError:
        # The decoder guards its own recursion: a hostile depth ends here, cleanly.
        raise InvalidInput(field, f"nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise InvalidInput(field, f"is not JSON: {exc}", status=400) from None
    return json_value(field, value, max_depth=max_depth)




def invalid_model_input(exc: ValidationError, what: str, *, field: str = "input") -> InvalidInput:
    """The :class:`InvalidInput` that refuses a value ``exc`` found not to fit its model:
    its text names each bad field in words (``"{what}: sku: Field required; qty: ..."``),
    and its ``errors`` list each (loc, msg, type), ``loc`` starting at ``field``.

    Args:
        exc: The model's validation error.
        what: What the value was for, starting the text.
        field: Where the value is.
    """
    root = tuple(field.split("."))
    problems = [FieldProblem((*root, *e["loc"]), e["msg"], e["type"])
                for e in exc.errors(include_url=False)]
    words = "; ".join(
        f"{'.'.join(str(p) for p in e.loc[len(root):]) or 'the value'}: {e.msg}"
        for e in problems)
    return InvalidInput(field, words, errors=problems, message=f"{what}: {words}")
