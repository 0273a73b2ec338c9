"""Secret providers: where a tool's credentials come from at call time.

A tool declares the secrets it needs (``@tool(secrets=("ERP_TOKEN",))``); for each call
the engine asks its provider for them and hands them over in
:attr:`~underway.effects.CallInfo.secrets`. They are never journaled, logged or traced,
and a secret value that appears in a tool's error message is masked before the failure
is journaled.

Environments: :class:`BoundSecrets` binds secrets to the environments they belong to
(``ERP_TOKEN`` to ``prod``); a worker in another environment (``--environment dev``) is
refused them (:class:`~underway.errors.SecretRefused`), and the engine journals the refusal
before the tool runs.

Credentials that expire: a tool whose service refused its credentials raises an error
with ``credentials_rejected = True`` (:class:`CredentialsRejected`, or an
:class:`underway.http.HTTPError` for a 401 answer). The engine asks the provider to
:func:`refresh` the tool's secrets and tries the call once more on a durable timer; refused
again, the run escalates to a person. It never fails quietly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from .errors import ConfigurationError, SecretRefused, UnderwayError

__all__ = [
    "MASK",
    "BoundSecrets",
    "CallbackSecrets",
    "CredentialsRejected",
    "EnvSecrets",
    "FileSecrets",
    "Refreshable",
    "SecretMissing",
    "SecretProvider",
    "mask",
]

MASK = "[secret]"
"""What a secret value is replaced with wherever it would otherwise be recorded."""


class SecretProvider(Protocol):
    """Returns the value of a named secret, or raises :class:`SecretMissing`."""

    def get(self, name: str) -> str:
        """The value of secret ``name``."""
        ...


class Refreshable(Protocol):
    """A provider that caches secrets and can fetch one anew (a vault client holding a
    short-lived token): :func:`refresh` calls it after a service refused the credentials."""

    def refresh(self, name: str) -> None:
        """Forget the cached value of ``name``; the next :meth:`get` fetches it anew."""
        ...


class CredentialsRejected(UnderwayError):
    """Raised by a tool whose service refused its credentials (expired, revoked): the
    engine refreshes the tool's secrets and tries once more, then escalates."""

    credentials_rejected = True


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


class BoundSecrets:
    """Secrets bound to the environments they belong to.

    ``BoundSecrets(EnvSecrets(prefix="APP_"), {"ERP_TOKEN": "prod", "ERP_SANDBOX": ["dev",
    "staging"]}, environment="dev")`` reads through ``provider`` for a worker in
    ``environment``. A secret bound to other environments is refused with
    :class:`~underway.errors.SecretRefused` and never fetched.

    Args:
        provider: Where the secrets are read.
        bindings: Each secret's name and the environments it is bound to.
        environment: The worker's environment.
        default: Binds the secrets not listed; None lets any environment read them.
    """

    def __init__(
        self, provider: SecretProvider, bindings: Mapping[str, str | Iterable[str]], *,
        environment: str, default: str | Iterable[str] | None = None,
    ) -> None:
        self.provider = provider
        self.environment = environment
        self.bindings = {name: _environments(name, envs) for name, envs in bindings.items()}
        self.default = None if default is None else _environments("default", default)

    def rebound(self, environment: str) -> BoundSecrets:
        """The same provider and bindings for a worker in another environment.

        Args:
            environment: That worker's environment.
        """
        return BoundSecrets(self.provider, self.bindings, environment=environment,
                            default=self.default)

    def bound_to(self, name: str) -> tuple[str, ...] | None:
        """The environments that may read ``name`` (None: every one)."""
        return self.bindings.get(name, self.default)

    def refusal(self, name: str) -> SecretRefused | None:
        """Why this worker may not read ``name``, or None when it may."""
        bound = self.bound_to(name)
        if bound is None or self.environment in bound:
            return None
        return SecretRefused(name, bound, self.environment)

    def get(self, name: str) -> str:
        """The value of ``name``, when this worker's environment may read it."""
        refused = self.refusal(name)
        if refused is not None:
            raise refused
        return self.provider.get(name)

    def refresh(self, name: str) -> None:
        """Refresh ``name`` in the wrapped provider (when it caches)."""
        refresh(self.provider, (name,))


def _environments(name: str, envs: str | Iterable[str]) -> tuple[str, ...]:
    out = (envs,) if isinstance(envs, str) else tuple(envs)
    if not out or not all(isinstance(e, str) and e for e in out):
        raise ConfigurationError(
            f"secret {name!r} must be bound to one or more environment names, not {envs!r}")
    return out


def refusal(provider: SecretProvider | None, names: Iterable[str]) -> SecretRefused | None:
    """The first of ``names`` the provider refuses to this worker's environment (see
    :class:`BoundSecrets`), or None."""
    check = getattr(provider, "refusal", None)
    if check is None:
        return None
    for name in names:
        refused: SecretRefused | None = check(name)
        if refused is not None:
            return refused
    return None


def refresh(provider: SecretProvider | None, names: Iterable[str]) -> None:
    """Ask ``provider`` to fetch ``names`` anew (a no-op for one that never caches, as the
    built-in ones: they read on every call)."""
    again = getattr(provider, "refresh", None)
    if again is None:
        return
    for name in names:
        again(name)


def credentials_rejected(exc: BaseException) -> bool:
    """True when ``exc`` says a service refused the call's credentials."""
    return bool(getattr(exc, "credentials_rejected", False))


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
