"""What model calls cost: USD per million tokens, per model id or glob pattern.

A table is built from a dict or a TOML file::

    # prices.toml: USD per 1M tokens
    [prices."gpt-4o-mini*"]
    input = 0.15
    output = 0.60
    cached_input = 0.075        # optional: prompt-cache reads; defaults to input

An exact model id wins over a pattern; among patterns the longest match wins, so
``gpt-4o-mini*`` prices ``gpt-4o-mini-2024-07-18`` even when ``gpt-4o*`` is also listed.
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable"]

_PER = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """USD per million input and output tokens; ``cached_input`` prices prompt-cache reads
    (``None``: the same as ``input``)."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for field, value in (("input", self.input), ("output", self.output),
                             ("cached_input", self.cached_input)):
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ConfigurationError(
                    f"price {field} must be a non-negative number, not {value}"
                )

    def cost(self, tokens_in: int, tokens_out: int, cached_tokens_in: int = 0) -> float:
        """USD for one call; ``cached_tokens_in`` is the part of ``tokens_in`` read from cache."""
        cached = min(max(cached_tokens_in, 0), tokens_in)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return (
            (tokens_in - cached) * self.input + cached * cached_rate + tokens_out * self.output
        ) / _PER


DEFAULT_PRICES: Mapping[str, Price] = {
    # Examples only, in USD per 1M tokens as published by the providers at one point in
    # time. Prices change: check your provider's price page and load your own table.
    "gpt-4o": Price(input=2.50, output=10.00, cached_input=1.25),
    "gpt-4o-2*": Price(input=2.50, output=10.00, cached_input=1.25),
    "gpt-4o-mini*": Price(input=0.15, output=0.60, cached_input=0.075),
    "gpt-4.1*": Price(input=2.00, output=8.00, cached_input=0.50),
    "gpt-4.1-mini*": Price(input=0.40, output=1.60, cached_input=0.10),
    "gpt-4.1-nano*": Price(input=0.10, output=0.40, cached_input=0.025),
    "claude-3-5-haiku*": Price(input=0.80, output=4.00, cached_input=0.08),
    "claude-haiku-4-5*": Price(input=1.00, output=5.00, cached_input=0.10),
    "claude-3-7-sonnet*": Price(input=3.00, output=15.00, cached_input=0.30),
    "claude-sonnet-4*": Price(input=3.00, output=15.00, cached_input=0.30),
    "claude-opus-4-1*": Price(input=15.00, output=75.00, cached_input=1.50),
}
"""A few well-known model ids, as examples to check against your provider's current prices."""


class PriceTable:
    """Prices by model id or glob pattern (``*``, ``?``, ``[...]``). Immutable:
    :meth:`with_prices` returns a new table."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._exact: dict[str, Price] = {}
        self._patterns: list[tuple[str, Price]] = []
        for key, price in (prices or {}).items():
            if not isinstance(price, Price):
                raise ConfigurationError(
                    f"price for {key!r} must be a Price, not {type(price).__name__}"
                )
            if any(c in key for c in "*?["):
                self._patterns.append((key, price))
            else:
                self._exact[key] = price
        # Longest pattern first: the most specific match wins.
        self._patterns.sort(key=lambda kp: len(kp[0]), reverse=True)

    @classmethod
    def default(cls) -> PriceTable:
        """The example prices in :data:`DEFAULT_PRICES`."""
        return cls(DEFAULT_PRICES)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PriceTable:
        """A table from ``{model: {"input": .., "output": .., "cached_input": ..}}`` (USD per
        1M tokens); a model may also map to a :class:`Price`."""
        return cls({str(k): _price(str(k), v) for k, v in data.items()})

    @classmethod
    def from_toml(cls, path: str | Path) -> PriceTable:
        """A table from a TOML file with one ``[prices."<model or pattern>"]`` table each."""
        p = Path(path)
        try:
            with p.open("rb") as f:
                doc = tomllib.load(f)
        except OSError as exc:
            raise ConfigurationError(f"cannot read price table {p}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"price table {p} is not valid TOML: {exc}") from exc
        prices = doc.get("prices")
        if not isinstance(prices, dict) or set(doc) - {"prices"}:
            raise ConfigurationError(
                f'price table {p} must hold only [prices."<model>"] tables, found: '
                f"{', '.join(sorted(doc)) or 'nothing'}"
            )
        return cls.from_dict(prices)

    def with_prices(self, prices: Mapping[str, Price | Mapping[str, Any]]) -> PriceTable:
        """A copy of this table with ``prices`` added or replaced."""
        merged = dict(self.items())
        merged.update({k: _price(k, v) for k, v in prices.items()})
        return PriceTable(merged)

    def items(self) -> list[tuple[str, Price]]:
        """Every (model id or pattern, price) in the table."""
        return [*self._exact.items(), *self._patterns]

    def lookup(self, model: str) -> Price | None:
        """The price of ``model``: its exact entry, else the longest matching pattern."""
        exact = self._exact.get(model)
        if exact is not None:
            return exact
        for pattern, price in self._patterns:
            if fnmatch.fnmatchcase(model, pattern):
                return price
        return None

    def cost(
        self, model: str, tokens_in: int, tokens_out: int, cached_tokens_in: int = 0
    ) -> float | None:
        """USD for one call of ``model``, or ``None`` when the table has no price for it."""
        price = self.lookup(model)
        return None if price is None else price.cost(tokens_in, tokens_out, cached_tokens_in)

    def __repr__(self) -> str:
        return f"PriceTable({len(self._exact) + len(self._patterns)} entries)"


def _price(model: str, value: Any) -> Price:
    if isinstance(value, Price):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"price for {model!r} must be a table with input and output (USD per 1M tokens)"
        )
    unknown = set(value) - {"input", "output", "cached_input"}
    missing = {"input", "output"} - set(value)
    if unknown or missing:
        raise ConfigurationError(
            f"price for {model!r}: "
            + "; ".join(
                part for part in (
                    f"missing {', '.join(sorted(missing))}" if missing else "",
                    f"unknown keys {', '.join(sorted(unknown))}" if unknown else "",
                ) if part
            )
            + " (expected input, output and optionally cached_input, USD per 1M tokens)"
        )
    try:
        cached = value.get("cached_input")
        return Price(
            input=float(value["input"]),
            output=float(value["output"]),
            cached_input=None if cached is None else float(cached),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"price for {model!r} must be numbers: {exc}") from exc
