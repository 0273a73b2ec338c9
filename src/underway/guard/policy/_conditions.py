"""Structured conditions on a call's arguments, amount and counters (no ``eval``), and
whether the run's data subject consents to a purpose.

Each condition is checked when a policy is built, so a bad operator, value or regular
expression is reported then, naming its field; at evaluation a condition either holds,
does not, or raises :class:`Unevaluable` (an argument of the wrong type), which the policy
turns into a denial.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar, Literal

from ...errors import UnderwayError
from .context import Amount, PolicyContext, to_decimal
from .errors import PolicyError

ArgOp = Literal[
    "==", "!=", ">", ">=", "<", "<=", "in", "not_in", "contains", "matches", "exists", "missing"
]
"""Operators of an argument condition."""

CompareOp = Literal["==", "!=", ">", ">=", "<", "<="]
"""Operators of amount and counter conditions."""

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
    "<": operator.lt, "<=": operator.le,
}
_ORDERING = frozenset({">", ">=", "<", "<="})
ARG_OPS: tuple[str, ...] = (
    *_COMPARE, "in", "not_in", "contains", "matches", "exists", "missing"
)
_MISSING = object()


class Unevaluable(UnderwayError):
    """A condition could not be evaluated against this call (e.g. a string compared with
    a number): the policy denies the call rather than guess."""


def _unknown_op(op: object, allowed: tuple[str, ...]) -> PolicyError:
    return PolicyError(f"unknown operator {op!r}; use one of {' '.join(allowed)}", field="op")


def _equal(a: object, b: object) -> bool:
    """Equality where 10000, 10000.0 and Decimal('10000') agree but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float | Decimal) and isinstance(b, int | float | Decimal):
        return to_decimal(a) == to_decimal(b)
    return a == b


def _from_mapping(
    data: Mapping[str, Any], kind: str, known: tuple[str, ...], required: tuple[str, ...]
) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise PolicyError(f"{kind} conditions are tables/mappings, not {data!r}")
    for key in data:
        if key not in known:
            raise PolicyError(
                f"unknown field {key!r}; {kind} conditions have {', '.join(known)}",
                field=str(key),
            )
    for key in required:
        if key not in data:
            raise PolicyError(f"{kind} conditions need {key!r}", field=key)
    return dict(data)


@dataclass(frozen=True, slots=True)
class ArgCondition:
    """A test of one argument: ``ArgCondition("amount", ">", 10000)``.

    ``path`` is dotted into nested arguments (``customer.address.city``; a numeric part
    indexes a list). ``in``/``not_in`` take a list; ``contains`` tests a substring of a
    string, an element of a list or a key of a mapping; ``matches`` searches a regular
    expression in a string; ``exists``/``missing`` take no value. Ordering operators
    compare numbers (numeric strings included) when ``value`` is a number, else strings.
    An argument that is absent satisfies only ``missing``.
    """

    path: str
    op: ArgOp
    value: Any = None
    _parts: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _number: Decimal | None = field(init=False, repr=False, compare=False)
    _regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _test: Callable[[Any], bool] = field(init=False, repr=False, compare=False)
    _single: bool = field(init=False, repr=False, compare=False)
    _whole: int | None = field(init=False, repr=False, compare=False)
    _compare: Callable[[Any, Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path or "" in self.path.split("."):
            raise PolicyError(
                f"argument path must be a dotted name such as 'customer.id', not {self.path!r}",
                field="arg",
            )
        if self.op not in ARG_OPS:
            raise _unknown_op(self.op, ARG_OPS)
        number, regex, value = None, None, self.value
        if self.op in ("exists", "missing"):
            if value is not None:
                raise PolicyError(f"operator {self.op!r} takes no value", field="value")
        elif self.op in ("in", "not_in"):
            if not isinstance(value, list | tuple | frozenset | set):
                raise PolicyError(
                    f"operator {self.op!r} needs a list of values, not {value!r}", field="value"
                )
            value = tuple(value)
        elif self.op == "matches":
            if not isinstance(value, str):
                raise PolicyError(
                    f"operator 'matches' needs a regular expression string, not {value!r}",
                    field="value",
                )
            try:
                regex = re.compile(value)
            except re.error as exc:
                raise PolicyError(
                    f"bad regular expression {value!r}: {exc}", field="value"
                ) from None
        elif self.op in _ORDERING:
            number = to_decimal(value)
            if number is None and not isinstance(value, str):
                raise PolicyError(
                    f"operator {self.op!r} needs a number or a string, not {value!r}",
                    field="value",
                )
        elif value is None and self.op == "contains":
            raise PolicyError("operator 'contains' needs a value", field="value")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "_parts", tuple(self.path.split(".")))
        object.__setattr__(self, "_number", number)
        object.__setattr__(self, "_regex", regex)
        object.__setattr__(self, "_test", self._TESTS[self.op].__get__(self))
        # Fast paths for the common cases: a top-level argument, an integer bound.
        object.__setattr__(self, "_single", len(self._parts) == 1)
        whole = int(number) if number is not None and number == number.to_integral_value() else None
        object.__setattr__(self, "_whole", whole)
        object.__setattr__(self, "_compare", _COMPARE.get(self.op, operator.eq))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArgCondition:
        """Build from the file form ``{arg = "amount", op = ">", value = 10000}``."""
        d = _from_mapping(data, "argument", ("arg", "op", "value"), ("arg", "op"))
        return cls(d["arg"], d["op"], d.get("value"))

    def to_dict(self) -> dict[str, Any]:
        """The file form of this condition."""
        out: dict[str, Any] = {"arg": self.path, "op": self.op}
        if self.op not in ("exists", "missing"):
            out["value"] = list(self.value) if isinstance(self.value, tuple) else self.value
        return out

    def _lookup(self, args: Mapping[str, Any]) -> Any:
        value: Any = args
        for part in self._parts:
            if type(value) is dict or isinstance(value, Mapping):
                value = value.get(part, _MISSING)
                if value is _MISSING:
                    return _MISSING
            elif isinstance(value, list | tuple) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return _MISSING
        return value

    def holds(self, ctx: PolicyContext) -> bool:
        """Whether the call's arguments satisfy this condition."""
        args = ctx.args
        if self._single and type(args) is dict:
            actual = args.get(self.path, _MISSING)
        else:
            actual = self._lookup(args)
        if actual is _MISSING:
            return self.op == "missing"
        return self._test(actual)

    def _present(self, actual: Any) -> bool:
        return self.op == "exists"

    def _equals(self, actual: Any) -> bool:
        return _equal(actual, self.value)

    def _differs(self, actual: Any) -> bool:
        return not _equal(actual, self.value)

    def _among(self, actual: Any) -> bool:
        return any(_equal(actual, v) for v in self.value)

    def _not_among(self, actual: Any) -> bool:
        return not any(_equal(actual, v) for v in self.value)

    def _matches(self, actual: Any) -> bool:
        if not isinstance(actual, str) or self._regex is None:
            raise Unevaluable(
                f"argument {self.path!r} is {actual!r}, not a string to match "
                f"{self.value!r} against"
            )
        return self._regex.search(actual) is not None

    def _contains(self, actual: Any) -> bool:
        if isinstance(actual, str) and isinstance(self.value, str):
            return self.value in actual
        if isinstance(actual, list | tuple):
            return any(_equal(item, self.value) for item in actual)
        if isinstance(actual, Mapping):
            return self.value in actual
        raise Unevaluable(
            f"argument {self.path!r} is {actual!r}, which cannot contain {self.value!r}"
        )

    def _ordered(self, actual: Any) -> bool:
        if self._number is not None:
            if type(actual) is int and self._whole is not None:
                return self._compare(actual, self._whole)
            left = to_decimal(actual)
            if left is None:
                raise Unevaluable(
                    f"argument {self.path!r} is {actual!r}, not a number to compare "
                    f"{self.op} {self.value!r}"
                )
            return self._compare(left, self._number)
        if not isinstance(actual, str):
            raise Unevaluable(
                f"argument {self.path!r} is {actual!r}, not a string to compare "
                f"{self.op} {self.value!r}"
            )
        return self._compare(actual, self.value)

    _TESTS: ClassVar[dict[str, Callable[[ArgCondition, Any], bool]]] = {
        "exists": _present, "missing": _present, "==": _equals, "!=": _differs,
        "in": _among, "not_in": _not_among, "matches": _matches, "contains": _contains,
        ">": _ordered, ">=": _ordered, "<": _ordered, "<=": _ordered,
    }


@dataclass(frozen=True, slots=True)
class AmountCondition:
    """A test of the money a call moves: ``AmountCondition(">", "10000", "INR")``.

    Holds only for an amount in ``currency``: an amount in another currency, or a call
    that moves no money, does not satisfy it (amounts are never converted).
    """

    op: CompareOp
    value: Decimal
    currency: str

    def __post_init__(self) -> None:
        if self.op not in _COMPARE:
            raise _unknown_op(self.op, tuple(_COMPARE))
        value = to_decimal(self.value)
        if value is None:
            raise PolicyError(
                f"amount value must be a number or a numeric string, not {self.value!r}",
                field="value",
            )
        if not isinstance(self.currency, str) or not self.currency.strip():
            raise PolicyError(
                f"an amount condition needs a currency code such as 'INR', not {self.currency!r}",
                field="currency",
            )
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "currency", self.currency.strip().upper())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AmountCondition:
        """Build from the file form ``{op = ">", value = "10000", currency = "INR"}``."""
        d = _from_mapping(
            data, "amount", ("op", "value", "currency"), ("op", "value", "currency")
        )
        return cls(d["op"], d["value"], d["currency"])

    def to_dict(self) -> dict[str, Any]:
        """The file form of this condition (the value as a plain decimal string)."""
        return {"op": self.op, "value": _plain(self.value), "currency": self.currency}

    def holds(self, amount: Amount | None) -> bool:
        """Whether ``amount`` satisfies this condition."""
        if amount is None or amount.currency != self.currency:
            return False
        return _COMPARE[self.op](amount.value, self.value)


@dataclass(frozen=True, slots=True)
class CounterCondition:
    """A test of a usage counter: ``CounterCondition("tenant.messages.today", ">=", 3)``.

    A counter the context does not carry counts as 0.
    """

    counter: str
    op: CompareOp
    value: float

    def __post_init__(self) -> None:
        if not isinstance(self.counter, str) or not self.counter:
            raise PolicyError(
                f"counter must be a name such as 'run.tool_calls', not {self.counter!r}",
                field="counter",
            )
        if self.op not in _COMPARE:
            raise _unknown_op(self.op, tuple(_COMPARE))
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise PolicyError(f"counter value must be a number, not {self.value!r}", field="value")
        object.__setattr__(self, "value", float(self.value))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CounterCondition:
        """Build from the file form ``{counter = "run.messages", op = ">=", value = 3}``."""
        d = _from_mapping(
            data, "counter", ("counter", "op", "value"), ("counter", "op", "value")
        )
        return cls(d["counter"], d["op"], d["value"])

    def to_dict(self) -> dict[str, Any]:
        """The file form of this condition."""
        return {"counter": self.counter, "op": self.op, "value": self.value}

    def holds(self, counters: Mapping[str, float]) -> bool:
        """Whether ``counters`` satisfy this condition."""
        return _COMPARE[self.op](counters.get(self.counter, 0.0), self.value)


def _plain(d: Decimal) -> str:
    """``d`` without exponent or trailing zeros, so equal amounts print alike."""
    return format(d.normalize(), "f")


def consent_missing(ctx: PolicyContext, purpose: str) -> str | None:
    """Why the run of ``ctx`` lacks its subject's consent for ``purpose`` now (None: the
    consent is granted): it names no subject, the subject never consented, or withdrew."""
    if ctx.subject is None:
        return f"the run names no data subject, so nobody consented to {purpose!r}"
    found = ctx.consents.get(purpose)
    if found is None:
        return f"subject {ctx.subject!r} has not consented to {purpose!r}"
    if found.state == "granted":
        return None
    when = datetime.fromtimestamp(found.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ref = f", reference {found.reference}" if found.reference else ""
    return (f"subject {ctx.subject!r} withdrew consent to {purpose!r} at {when} "
            f"(recorded by {found.by}{ref})")
