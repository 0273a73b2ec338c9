"""Run labels: typed names and values a run is found, shown and grouped by.

A label is business context: the SKU, the patient, the amount a run is about. A run gets
labels at its start (``labels=`` of a start, ``--label`` of ``runs start``, the ``labels``
of the API's start body, an intake route's ``labels``) and from its flow
(``ctx.label(sku="A-7")``). Both are journaled, so the index of labels is a projection of
the journal, like the runs row.

A label's name starts with a letter; letters, digits, ``_``, ``-`` and ``.`` follow, at
most :data:`MAX_KEY` in all. A value is a ``str`` (at most :data:`MAX_VALUE` characters),
an ``int`` (signed 64-bit), a finite ``float`` or a ``bool``. A run has at most
:data:`MAX_LABELS` labels. Anything else raises :class:`~underway.errors.InvalidInput`
naming the label.

A filter compares a value's text (:func:`label_text`): ``qty=7`` finds ``7`` and ``"7"``,
``paid=true`` finds ``True``.

>>> check_labels({"sku": "A-7", "qty": 3})
{'qty': 3, 'sku': 'A-7'}
>>> typed_value("007"), typed_value("7"), typed_value("true")
('007', 7, True)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping

from .errors import InvalidInput

__all__ = [
    "MAX_KEY",
    "MAX_LABELS",
    "MAX_VALUE",
    "LabelValue",
    "check_key",
    "check_labels",
    "check_value",
    "label_filter",
    "label_kind",
    "label_text",
    "parse_label",
    "parse_labels",
    "stored_value",
    "typed_value",
]

LabelValue = bool | int | float | str
"""The types a label's value may have."""
MAX_KEY = 40
"""The longest label name."""
MAX_VALUE = 200
"""The longest text value of a label."""
MAX_LABELS = 20
"""The most labels one run has."""

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*\Z")
_BAD_CHAR = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
_MAX_INT = 2**63 - 1


def check_key(key: object, *, field: str = "labels") -> str:
    """``key`` when it is a good label name; else raise naming it.

    Args:
        key: The name.
        field: Where it came from, for the error.
    """
    if not isinstance(key, str) or not key:
        raise InvalidInput(field, f"a label name must be text, not {key!r}")
    if len(key) > MAX_KEY or not _KEY.match(key):
        raise InvalidInput(
            f"{field}.{key[:MAX_KEY]}",
            f"bad label name {key[:60]!r}: start with a letter, then letters, digits, "
            f"'_', '-' or '.', at most {MAX_KEY} characters")
    return key


def check_value(key: str, value: object, *, field: str = "labels") -> LabelValue:
    """``value`` when a label can hold it; else raise naming the label.

    Args:
        key: The label's name.
        value: Its value.
        field: Where it came from, for the error.
    """
    where = f"{field}.{key}"
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -_MAX_INT - 1 <= value <= _MAX_INT:
            raise InvalidInput(where, f"label {key!r}: {value} does not fit 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(where, f"label {key!r}: {value} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_VALUE:
            raise InvalidInput(
                where, f"label {key!r}: {len(value)} characters; at most {MAX_VALUE}")
        if _BAD_CHAR.search(value):
            raise InvalidInput(where, f"label {key!r}: control characters are not allowed")
        return value
    raise InvalidInput(
        where, f"label {key!r}: a value is text, a whole number, a number or true/false, "
        f"not {type(value).__name__}")


def check_labels(labels: Mapping[str, object] | None, *, field: str = "labels",
                 present: int = 0) -> dict[str, LabelValue]:
    """The labels, checked, sorted by name.

    Raises :class:`~underway.errors.InvalidInput` naming the first bad label.

    Args:
        labels: Names and values (None: none).
        field: Where they came from, for the error.
        present: Labels the run already has that these do not name.
    """
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidInput(field, f"labels are names and values, not {type(labels).__name__}")
    checked = {check_key(k, field=field): check_value(k, v, field=field)
               for k, v in labels.items()}
    if len(checked) + present > MAX_LABELS:
        raise InvalidInput(field, f"{len(checked) + present} labels; a run has at most "
                                  f"{MAX_LABELS}")
    return dict(sorted(checked.items()))


def label_text(value: LabelValue) -> str:
    """What a filter compares: a value as text (``true``/``false`` for a flag).

    Args:
        value: The label's value.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def label_filter(labels: Mapping[str, object] | None) -> dict[str, str]:
    """A filter by labels as the store takes it: names and value texts, checked.

    Raises :class:`~underway.errors.InvalidInput` naming a bad name or value.

    Args:
        labels: Names and values (typed, or as text).
    """
    if not labels:
        return {}
    return {check_key(k, field="labels"):
            label_text(check_value(k, v, field="labels")) for k, v in labels.items()}


def label_kind(value: LabelValue) -> str:
    """The type a value has, by name: ``bool``, ``int``, ``float`` or ``str``.

    Args:
        value: The label's value.
    """
    return type(value).__name__


def stored_value(text: str, kind: str) -> LabelValue:
    """A value as the index stores it (its text and type) back in its type.

    Args:
        text: The value's text (:func:`label_text`).
        kind: Its type's name (:func:`label_kind`).
    """
    if kind == "bool":
        return text == "true"
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    return text


def typed_value(text: str) -> LabelValue:
    """A value given as text, typed: a number or ``true``/``false`` when its text is
    exactly that value's text (``7``, ``7.5``, ``true``); otherwise the text (``007``,
    ``7.50``, ``A-7``).

    Args:
        text: The value as given.
    """
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if isinstance(parsed, bool | int | float) and label_text(parsed) == text:
        return parsed
    return text


def parse_label(given: str, *, field: str = "label") -> tuple[str, str]:
    """``(name, value text)`` of a ``name=value`` pair.

    Args:
        given: The pair.
        field: Where it came from, for the error.
    """
    key, sep, value = given.partition("=")
    if not sep:
        raise InvalidInput(field, f"{given[:60]!r}: give a label as name=value")
    try:
        check_key(key, field=field)
        check_value(key, value, field=field)
    except InvalidInput as exc:
        # The pair is the field here: the name may be what is wrong.
        raise InvalidInput(field, exc.problem) from None
    return key, value


def parse_labels(given: Iterable[str], *, field: str = "label") -> dict[str, str]:
    """``name=value`` pairs as names and value texts (a filter).

    Args:
        given: The pairs.
        field: Where they came from, for the error.
    """
    found: dict[str, str] = {}
    for pair in given:
        key, value = parse_label(pair, field=field)
        if key in found and found[key] != value:
            raise InvalidInput(field, f"label {key!r} is given twice")
        found[key] = value
    if len(found) > MAX_LABELS:
        raise InvalidInput(field, f"{len(found)} labels; filter on at most {MAX_LABELS}")
    return found
