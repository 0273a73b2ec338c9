"""Build a model adapter from environment variables.

``UNDERWAY_MODEL`` picks provider and model:

- ``openai:<model>``: OpenAI, key in ``OPENAI_API_KEY`` (``OPENAI_BASE_URL`` respected);
- ``anthropic:<model>``: Anthropic, key in ``ANTHROPIC_API_KEY`` (``ANTHROPIC_BASE_URL``
  respected);
- ``openai-compatible:<model>@<base_url>``: any Chat Completions server (vLLM, Ollama,
  llama.cpp), key in ``UNDERWAY_MODEL_API_KEY`` if the server wants one. ``OPENAI_API_KEY``
  is deliberately not sent there: an OpenAI key has no business at another server.

``UNDERWAY_MODEL_PRICES`` may name a TOML price table (see :mod:`underway.models.pricing`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, overload

from ..errors import ConfigurationError
from .anthropic_messages import AnthropicMessages
from .openai_chat import OpenAIChat
from .pricing import PriceTable

__all__ = ["from_env"]

_FORMS = (
    "openai:<model>, anthropic:<model> or openai-compatible:<model>@<base_url> "
    "(e.g. openai-compatible:llama3.1@http://127.0.0.1:11434/v1)"
)


@overload
def from_env(
    environ: Mapping[str, str] | None = None, *, required: Literal[True]
) -> OpenAIChat | AnthropicMessages: ...


@overload
def from_env(
    environ: Mapping[str, str] | None = None, *, required: bool = False
) -> OpenAIChat | AnthropicMessages | None: ...


def from_env(
    environ: Mapping[str, str] | None = None, *, required: bool = False
) -> OpenAIChat | AnthropicMessages | None:
    """The adapter ``UNDERWAY_MODEL`` describes, or ``None`` when it is unset or empty.

    With ``required=True`` an unset ``UNDERWAY_MODEL`` raises :class:`ConfigurationError`
    saying what to set, for a program that cannot run without a model.
    """
    env = os.environ if environ is None else environ
    spec = env.get("UNDERWAY_MODEL", "").strip()
    if not spec:
        if required:
            raise ConfigurationError(
                f"no model is configured: set UNDERWAY_MODEL to {_FORMS}"
            )
        return None
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ConfigurationError(f"UNDERWAY_MODEL={spec!r} is not one of {_FORMS}")
    prices_path = env.get("UNDERWAY_MODEL_PRICES")
    prices = PriceTable.from_toml(prices_path) if prices_path else None
    if provider == "openai":
        return OpenAIChat(
            rest, api_key=_key(env, "OPENAI_API_KEY", spec),
            base_url=env.get("OPENAI_BASE_URL") or None, prices=prices,
        )
    if provider == "anthropic":
        return AnthropicMessages(
            rest, api_key=_key(env, "ANTHROPIC_API_KEY", spec),
            base_url=env.get("ANTHROPIC_BASE_URL") or None, prices=prices,
        )
    if provider == "openai-compatible":
        # Model names may hold "@" or ":" (llama3.1:8b); the URL starts at "@http".
        at = rest.rfind("@http")
        if at <= 0:
            raise ConfigurationError(
                f"UNDERWAY_MODEL={spec!r}: openai-compatible needs <model>@<base_url>, "
                "e.g. openai-compatible:llama3.1@http://127.0.0.1:11434/v1"
            )
        return OpenAIChat(
            rest[:at], base_url=rest[at + 1:], prices=prices,
            api_key=env.get("UNDERWAY_MODEL_API_KEY") or "unused",
            name=f"openai-compatible:{rest[:at]}",
        )
    raise ConfigurationError(
        f"UNDERWAY_MODEL={spec!r}: unknown provider {provider!r}; use {_FORMS}"
    )


def _key(env: Mapping[str, str], var: str, spec: str) -> str:
    key = env.get(var)
    if not key:
        raise ConfigurationError(f"UNDERWAY_MODEL={spec!r} needs {var} to be set")
    return key
