"""What model calls cost: USD per million tokens, per model id or glob pattern.

Prices come from a maintained source: the ``genai-prices`` package, which follows the
providers' price pages, long-context tiers and prompt-cache writes included. A table of
your own overrides it, built from a dict or a TOML file::

    # prices.toml: USD per 1M tokens
    [prices."gpt-4o-mini*"]
    input = 0.15
    output = 0.60
    cached_input = 0.075        # optional: prompt-cache reads; defaults to input
    cache_write = 0.1875        # optional: prompt-cache writes; defaults to input

An exact model id wins over a pattern; among patterns the longest match wins, so
``gpt-4o-mini*`` prices ``gpt-4o-mini-2024-07-18`` even when ``gpt-4o*`` is also listed.
A model the table does not name is priced by ``genai-prices``; one neither knows has no
price, and a call to it is refused wherever a cost budget applies.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import genai_prices
from genai_prices import types as genai_types

from ..errors import ConfigurationError

__all__ = ["MaintainedPrice", "Price", "PriceTable"]

_PER = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """USD per million input and output tokens; ``cached_input`` prices prompt-cache reads
    and ``cache_write`` prompt-cache writes (``None``: the same as ``input``)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name, value in (("input", self.input), ("output", self.output),
                             ("cached_input", self.cached_input),
                             ("cache_write", self.cache_write)):
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ConfigurationError(
                    f"price {name} must be a non-negative number, not {value}"
                )

    def cost(
        self, tokens_in: int, tokens_out: int, cached_tokens_in: int = 0,
        cache_write_tokens_in: int = 0,
    ) -> float:
        """USD for one call.

        Args:
            tokens_in: Every input token, cache reads and writes included.
            tokens_out: Output tokens.
            cached_tokens_in: The part of ``tokens_in`` read from the prompt cache.
            cache_write_tokens_in: The part of ``tokens_in`` written to the prompt cache.
        """
        cached = min(max(cached_tokens_in, 0), tokens_in)
        written = min(max(cache_write_tokens_in, 0), tokens_in - cached)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        write_rate = self.input if self.cache_write is None else self.cache_write
        return (
            (tokens_in - cached - written) * self.input + cached * cached_rate
            + written * write_rate + tokens_out * self.output
        ) / _PER


@dataclass(frozen=True, slots=True)
class MaintainedPrice:
    """A model's price as ``genai-prices`` holds it: tiers by context length, prompt-cache
    reads and writes, and the price in force at the time of the call.

    ``model`` and ``provider`` are the ids ``genai-prices`` matched.
    """

    model: str
    provider: str
    _info: genai_types.ModelInfo = field(repr=False, compare=False)
    _provider: genai_types.Provider = field(repr=False, compare=False)

    @property
    def context_window(self) -> int | None:
        """The most tokens the model takes in (None: not known)."""
        return self._info.context_window

    def cost(
        self, tokens_in: int, tokens_out: int, cached_tokens_in: int = 0,
        cache_write_tokens_in: int = 0,
    ) -> float:
        """USD for one call, as :meth:`Price.cost` counts tokens.

        Args:
            tokens_in: Every input token, cache reads and writes included.
            tokens_out: Output tokens.
            cached_tokens_in: The part of ``tokens_in`` read from the prompt cache.
            cache_write_tokens_in: The part of ``tokens_in`` written to the prompt cache.
        """
        cached = min(max(cached_tokens_in, 0), tokens_in)
        written = min(max(cache_write_tokens_in, 0), tokens_in - cached)
        usage = genai_prices.Usage(
            input_tokens=tokens_in, output_tokens=tokens_out,
            cache_read_tokens=cached, cache_write_tokens=written,
        )
        calc = self._info.calc_price(usage, self._provider,
                                     genai_request_timestamp=datetime.now(UTC))
        return float(calc.total_price)


@functools.lru_cache(maxsize=1024)
def _maintained(model: str, provider: str | None) -> MaintainedPrice | None:
    """The maintained price of ``model`` (at ``provider`` when given), None when unknown."""
    snapshot = genai_prices.data_snapshot.get_snapshot()
    try:
        found, info = snapshot.find_provider_model(model, None, provider, None)
    except LookupError:
        return None
    return MaintainedPrice(info.id, found.id, info, found)


class PriceTable:
    """Prices by model id or glob pattern (``*``, ``?``, ``[...]``), over the maintained
    prices of ``genai-prices``. Immutable: :meth:`with_prices` returns a new table.

    Args:
        prices: Prices that override the maintained ones.
        maintained: Whether a model the table does not name is looked up in
            ``genai-prices`` (False: it has no price).
    """

    def __init__(
        self, prices: Mapping[str, Price] | None = None, *, maintained: bool = True,
    ) -> None:
        self.maintained = maintained
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
        """The maintained prices alone."""
        return cls()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PriceTable:
        """A table from ``{model: {"input": .., "output": .., "cached_input": ..,
        "cache_write": ..}}`` (USD per 1M tokens) over the maintained prices; a model may
        also map to a :class:`Price`."""
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
        return PriceTable(merged, maintained=self.maintained)

    def items(self) -> list[tuple[str, Price]]:
        """Every (model id or pattern, price) in the table."""
        return [*self._exact.items(), *self._patterns]

    def lookup(self, model: str, *, provider: str | None = None) -> Price | MaintainedPrice | None:
        """The price of ``model``: its exact entry, else the longest matching pattern, else
        its maintained price (at ``provider``, an id such as ``openai``, when given)."""
        exact = self._exact.get(model)
        if exact is not None:
            return exact
        for pattern, price in self._patterns:
            if fnmatch.fnmatchcase(model, pattern):
                return price
        return _maintained(model, provider) if self.maintained and model else None

    def cost(
        self, model: str, tokens_in: int, tokens_out: int, cached_tokens_in: int = 0,
        cache_write_tokens_in: int = 0, *, provider: str | None = None,
    ) -> float | None:
        """USD for one call of ``model``, or ``None`` when it has no price.

        Args:
            model: The model id.
            tokens_in: Every input token, cache reads and writes included.
            tokens_out: Output tokens.
            cached_tokens_in: The part of ``tokens_in`` read from the prompt cache.
            cache_write_tokens_in: The part of ``tokens_in`` written to the prompt cache.
            provider: The provider's id, to tell apart models of one name.
        """
        price = self.lookup(model, provider=provider)
        if price is None:
            return None
        return price.cost(tokens_in, tokens_out, cached_tokens_in, cache_write_tokens_in)

    def most(
        self, model: str, tokens_in: int, tokens_out: int, *, provider: str | None = None,
    ) -> float | None:
        """The most a call of ``model`` can cost, or ``None`` when it has no price.

        Every input token counts as a cache write, when writes cost more.

        Args:
            model: The model.
            tokens_in: The most input tokens.
            tokens_out: The most output tokens.
            provider: The model's provider, when known.
        """
        price = self.lookup(model, provider=provider)
        if price is None:
            return None
        return max(price.cost(tokens_in, tokens_out),
                   price.cost(tokens_in, tokens_out, 0, tokens_in))

    def __repr__(self) -> str:
        return f"PriceTable({len(self._exact) + len(self._patterns)} entries)"


def _price(model: str, value: Any) -> Price:
    if isinstance(value, Price):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"price for {model!r} must be a table with input and output (USD per 1M tokens)"
        )
    unknown = set(value) - {"input", "output", "cached_input", "cache_write"}
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
            + " (expected input, output and optionally cached_input and cache_write, USD per "
              "1M tokens)"
        )
    try:
        cached, write = value.get("cached_input"), value.get("cache_write")
        return Price(
            input=float(value["input"]),
            output=float(value["output"]),
            cached_input=None if cached is None else float(cached),
            cache_write=None if write is None else float(write),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"price for {model!r} must be numbers: {exc}") from exc
