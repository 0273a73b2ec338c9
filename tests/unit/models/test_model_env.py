"""Adapters configured from environment variables, and the package without provider SDKs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from underway.errors import ConfigurationError
from underway.models import AnthropicMessages, OpenAIChat, from_env


def test_unset_means_no_model() -> None:
    assert from_env({}) is None
    assert from_env({"UNDERWAY_MODEL": "  "}) is None
    for unset in ({}, {"UNDERWAY_MODEL": " "}):
        with pytest.raises(ConfigurationError, match="set UNDERWAY_MODEL to openai:<model>"):
            from_env(unset, required=True)


def test_openai() -> None:
    model = from_env({"UNDERWAY_MODEL": "openai:gpt-4o-mini", "OPENAI_API_KEY": "sk-x"})
    assert isinstance(model, OpenAIChat)
    assert (model.name, model.model, model.base_url) == ("openai:gpt-4o-mini", "gpt-4o-mini",
                                                         None)


def test_anthropic() -> None:
    model = from_env({"UNDERWAY_MODEL": "anthropic:claude-sonnet-4-20250514",
                      "ANTHROPIC_API_KEY": "sk-ant-x",
                      "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"})
    assert isinstance(model, AnthropicMessages)
    assert (model.model, model.base_url) == ("claude-sonnet-4-20250514", "http://127.0.0.1:9/")


def test_openai_compatible_model_names_may_hold_colons(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."llama*"]\ninput = 0\noutput = 0\n')
    model = from_env({"UNDERWAY_MODEL": "openai-compatible:llama3.1:8b@http://127.0.0.1:11434/v1",
                      "UNDERWAY_MODEL_PRICES": str(prices)})
    assert isinstance(model, OpenAIChat)
    assert (model.model, model.base_url) == ("llama3.1:8b", "http://127.0.0.1:11434/v1")
    assert model.max_tokens_field == "max_tokens"
    assert model.prices.cost("llama3.1:8b", 1000, 1000) == 0.0


@pytest.mark.parametrize(("env", "message"), [
    ({"UNDERWAY_MODEL": "gpt-4o"}, "is not one of openai:<model>"),
    ({"UNDERWAY_MODEL": "mistral:large"}, "unknown provider 'mistral'"),
    ({"UNDERWAY_MODEL": "openai:gpt-4o"}, "needs OPENAI_API_KEY"),
    ({"UNDERWAY_MODEL": "anthropic:claude"}, "needs ANTHROPIC_API_KEY"),
    ({"UNDERWAY_MODEL": "openai-compatible:llama3"}, "needs <model>@<base_url>"),
])
def test_bad_settings_say_what_to_set(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        from_env(env)


def test_the_package_imports_without_the_sdks_and_adapters_name_the_extra() -> None:
    script = """
import sys
sys.modules["openai"] = None        # as if not installed
sys.modules["anthropic"] = None
import underway.models as m
from underway.errors import ConfigurationError
for build, extra in ((lambda: m.OpenAIChat("x", api_key="k"), "openai"),
                     (lambda: m.AnthropicMessages("x", api_key="k"), "anthropic")):
    try:
        build()
    except ConfigurationError as exc:
        assert f"pip install 'underway[{extra}]'" in str(exc), exc
    else:
        raise AssertionError("built without the SDK")
print("ok")
"""
    out = subprocess.run([sys.executable, "-W", "error", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr


def test_importing_the_package_does_not_import_the_sdks() -> None:
    script = ("import sys, underway.models; "
              "print(sorted({'openai', 'anthropic'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_public_api_is_pinned() -> None:
    import underway.models

    assert set(underway.models.__all__) == {
        "DEFAULT_RETRY", "AnthropicMessages", "BudgetBreach", "MaintainedPrice", "Message",
            "ModelError",
        "ModelRequest", "ModelResponse", "ModelRouter", "OpenAIChat", "Price", "PriceTable",
        "RetryNotice", "RouteBudget", "RouteBudgetExceeded", "RouteUsage", "ToolCall",
        "ToolSpec", "budget_breaches", "from_env", "route_usage",
    }
