"""Price tables: lookup by id and pattern, cost arithmetic, loading from dicts and TOML."""

from __future__ import annotations

from pathlib import Path

import pytest

from underway.errors import ConfigurationError
from underway.models import Price, PriceTable


def test_exact_id_beats_patterns_and_the_longest_pattern_wins() -> None:
    table = PriceTable.from_dict({
        "gpt-4o*": {"input": 2.5, "output": 10},
        "gpt-4o-mini*": {"input": 0.15, "output": 0.6},
        "gpt-4o-mini-special": {"input": 1, "output": 1},
    })
    assert table.lookup("gpt-4o-2024-08-06") == Price(input=2.5, output=10)
    assert table.lookup("gpt-4o-mini-2024-07-18") == Price(input=0.15, output=0.6)
    assert table.lookup("gpt-4o-mini-special") == Price(input=1, output=1)
    assert table.lookup("llama3.1:8b") is None
    assert table.cost("llama3.1:8b", 100, 100) is None


def test_cost_is_per_million_tokens_with_cached_input_priced_apart() -> None:
    price = Price(input=3.0, output=15.0, cached_input=0.3)
    assert price.cost(1_000_000, 0) == pytest.approx(3.0)
    assert price.cost(0, 1_000_000) == pytest.approx(15.0)
    assert price.cost(1_000_000, 0, cached_tokens_in=500_000) == pytest.approx(1.5 + 0.15)
    assert Price(input=1.0, output=1.0).cost(1_000_000, 0, 1_000_000) == pytest.approx(1.0)


def test_default_table_prices_well_known_dated_model_ids() -> None:
    table = PriceTable.default()
    assert table.cost("claude-sonnet-4-20250514", 10**6, 10**6) == pytest.approx(18.0)
    assert table.lookup("gpt-4o-2024-08-06") == table.lookup("gpt-4o")


def test_with_prices_returns_a_new_table() -> None:
    base = PriceTable.default()
    local = base.with_prices({"llama*": {"input": 0, "output": 0}})
    assert local.cost("llama3.1:8b", 10_000, 10_000) == 0.0
    assert base.lookup("llama3.1:8b") is None
    assert PriceTable(maintained=False).lookup("gpt-4o") is None


def test_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(
        '[prices."my-model-*"]\ninput = 1.25\noutput = 5\ncached_input = 0.125\n'
        '[prices."free-model"]\ninput = 0\noutput = 0\n'
    )
    table = PriceTable.from_toml(path)
    assert table.lookup("my-model-v2") == Price(input=1.25, output=5, cached_input=0.125)
    assert table.cost("free-model", 10**6, 10**6) == 0.0


@pytest.mark.parametrize(("text", "message"), [
    ("[prices\n", "not valid TOML"),
    ('[models."x"]\ninput = 1\noutput = 1\n', r'only \[prices'),
    ('[prices."x"]\ninput = 1\n', "missing output"),
    ('[prices."x"]\ninput = 1\noutput = 1\ncurrency = "EUR"\n', "unknown keys currency"),
    ('[prices."x"]\ninput = -1\noutput = 1\n', "non-negative"),
    ('[prices."x"]\ninput = "cheap"\noutput = 1\n', "must be numbers"),
])
def test_bad_price_tables_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        PriceTable.from_toml(path)


def test_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read price table"):
        PriceTable.from_toml(tmp_path / "nope.toml")


# List prices, USD per million tokens, as the providers publish them.
LIST = {
    # model: (input, output)
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "o3": (2.0, 8.0),
    "o4-mini": (1.10, 4.40),
    "claude-opus-4-5": (5.0, 25.0),
}


@pytest.mark.parametrize("model", sorted(LIST))
def test_models_once_unpriced_cost_their_list_price(model: str) -> None:
    per_in, per_out = LIST[model]
    cost = PriceTable.default().cost(model, 2_000_000, 500_000)
    assert cost == pytest.approx(2 * per_in + 0.5 * per_out)


@pytest.mark.parametrize(("tokens_in", "tokens_out", "cached", "written", "usd"), [
    # Sonnet 4.5 up to 200k input: $3 in, $15 out, $3.75 cache write, $0.30 cache read.
    (100_000, 1_000, 0, 0, 0.3 + 0.015),
    (100_000, 1_000, 0, 100_000, 0.375 + 0.015),
    (100_000, 1_000, 100_000, 0, 0.03 + 0.015),
    # Past 200k input the whole call is long-context: $6 in, $22.50 out, $7.50 write.
    (300_000, 10_000, 0, 0, 1.8 + 0.225),
    (300_000, 1_000, 0, 300_000, 2.25 + 0.0225),
])
def test_long_context_and_cache_writes_cost_their_list_price(
    tokens_in: int, tokens_out: int, cached: int, written: int, usd: float,
) -> None:
    cost = PriceTable.default().cost(
        "claude-sonnet-4-5", tokens_in, tokens_out, cached_tokens_in=cached,
        cache_write_tokens_in=written)
    assert cost == pytest.approx(usd)
