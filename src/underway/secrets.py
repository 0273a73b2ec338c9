"""Secret providers: where a tool's credentials come from at call time.

A tool declares the secrets it needs (``@tool(secrets=("ERP_TOKEN",))``); for each call
the engine asks its provider for them and hands them over in
:attr:`~underway.effects.CallInfo.secrets`. They are never journaled, logged or traced,
and a secret value that appears in a tool's error message is masked before the failure
is journaled.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from .errors import ConfigurationError

MASK = "[secret]"
"""What a secret value is replaced with wherever it would otherwise be recorded."""


class SecretProvider(Protocol):
    """Returns the value of a named secret, or raises :class:`SecretMissing`."""

    def get(self, name: str) -> str:
        """The value of secret ``name``."""
        ...


class SecretMissing(ConfigurationError):
    """A tool needs a secret its provider does not have."""

    def __init__(self, name: str, where: str) -> None:
        super().__init__(f"secret {name!r} is not available from {where}")
        self.name = name


class EnvSecrets:
    """Secrets from environment variables, optionally under a prefix
    (``EnvSecrets(prefix="UNDERWAY_SECRET_")`` reads ``ERP_TOKEN`` from
    ``UNDERWAY_SECRET_ERP_TOKEN``)."""

    def __init__(self, *, prefix: str = "", environ: Mapping[str, str] | None = None) -> None:
        self.prefix = prefix
        self._environ = os.environ if environ is None else environ

    def get(self, name: str) -> str:
        """The variable ``prefix + name``."""
        value = self._environ.get(self.prefix + name)
        if value is None:
            raise SecretMissing(name, f"environment variable {self.prefix + name}")
        return value


class FileSecrets:
    """Secrets as files in a directory (one file per secret, as mounted by Kubernetes or
    Docker secrets); surrounding whitespace is stripped."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def get(self, name: str) -> str:
        """The content of ``directory/name``."""
        if "/" in name or name in ("", ".", ".."):
            raise ConfigurationError(f"secret name {name!r} is not a plain file name")
        path = self.directory / name
        try:
            return path.read_text("utf-8").strip()
        except OSError:
            raise SecretMissing(name, f"file {path}") from None


class CallbackSecrets:
    """Secrets from a function (a vault client, a cloud secret manager)."""

    def __init__(self, fetch: Callable[[str], str | None]) -> None:
        self._fetch = fetch

    def get(self, name: str) -> str:
        """``fetch(name)``; None means missing."""
        value = self._fetch(name)
        if value is None:
            raise SecretMissing(name, "the secret callback")
        return value


def resolve(provider: SecretProvider | None, names: Iterable[str]) -> dict[str, str]:
    """Fetch every secret in ``names`` (an empty dict when there are none)."""
    names = tuple(names)
    if not names:
        return {}
    if provider is None:
        raise ConfigurationError(
            f"the tool needs secrets {list(names)} but the engine has no secret provider; "
            "pass Engine(secrets=EnvSecrets()) or another provider"
        )
    return {n: provider.get(n) for n in names}


def mask(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every secret value replaced by :data:`MASK`."""
    for value in sorted(secrets.values(), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return text
