"""Reading ``underway.toml`` (:func:`load_config`) and making what it describes: the
notifier, tenant budgets, policy, span exporter, anchoring and retention a worker runs
with."""

from __future__ import annotations

import difflib
import importlib
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, PrivateAttr, ValidationError

from .. import telemetry
from ..crypto.envelope import encrypt
from ..crypto.providers import EnvKey, KeyProvider, KeyringFile
from ..errors import ConfigurationError
from ..guard import DEFAULT_ENVIRONMENT, GuardOptions
from ..guard import policy as policies
from ..guard.approvals.keys import load_private_key
from ..guard.approvals.notify import MultiNotifier, Notifier, SmtpNotifier, WebhookNotifier
from ..guard.budgets import Budget, TenantBudgets
from ..ops.audit import Anchoring, FileAnchorLog
from ..privacy.retention import Periods, Retention, Rules
from ..secrets import BoundSecrets, EnvSecrets, SecretProvider
from ..store import connect
from ..store.base import Store
from ..store.regional import RegionalStore
from ._sections import (
    BASE,
    BudgetSection,
    PeriodsSection,
    Sections,
    TelemetrySection,
    TenantRetentionSection,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from ..guard.policy import Policy


class ConfigError(ConfigurationError):
    """A config file that cannot be used.

    When a file has several problems, ``key`` and ``problem`` describe the first. The
    message lists them all.

    Args:
        source: The file.
        key: The dotted path of the offending key (``notifier.webhook.url``); empty for the
            file as a whole.
        problem: What is wrong with it.
    """

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        super().__init__(f"{source}: {key}: {problem}" if key else f"{source}: {problem}")


DEFAULT_FILE = "underway.toml"
MIN_SESSION_SECRET = 32
"""The fewest characters a console session secret may have."""
"""The file ``underway worker`` and ``underway serve`` read when not given ``--config``
(in the current directory)."""


class Config(Sections):
    """A whole config file, checked: see docs/configuration.md for every key. Read one
    with :func:`load_config`; ``Config()`` is the defaults (what no file means).

    The ``make_*`` methods build what the file describes; secrets named by environment
    variable are read then, so a process that does not send notices (``underway serve``)
    needs none of them. Their errors name the file and the key.
    """

    _source: str | None = PrivateAttr(default=None)

    @property
    def source(self) -> str | None:
        """The file this was read from (None: no file, the defaults)."""
        return self._source

    @property
    def folder(self) -> Path | None:
        """The directory of that file, where its relative paths start."""
        return None if self._source is None else Path(os.path.abspath(self._source)).parent

    def _error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self._source or "the configuration", key, problem)

    def make_notifier(self, environ: Mapping[str, str] | None = None) -> Notifier | None:
        """The ``[notifier]``: a webhook, an SMTP notifier, both (one
        :class:`~underway.guard.approvals.notify.MultiNotifier`) or None. Secrets come from
        ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        found: list[Notifier] = []
        hook = self.notifier.webhook
        if hook is not None:
            secret = (None if hook.secret_env is None
                      else self._secret(env, "notifier.webhook.secret_env", hook.secret_env))
            found.append(WebhookNotifier(hook.url, secret=secret, timeout=hook.timeout))
        mail = self.notifier.smtp
        if mail is not None:
            password = (None if mail.password_env is None
                        else self._secret(env, "notifier.smtp.password_env", mail.password_env))
            found.append(SmtpNotifier(
                mail.host, mail.port, sender=mail.sender, recipients=mail.recipients,
                starttls=mail.starttls, username=mail.username, password=password,
                timeout=mail.timeout,
            ))
        if len(found) > 1:
            return MultiNotifier(*found)
        return found[0] if found else None

    def session_secret(self, environ: Mapping[str, str] | None = None) -> bytes | None:
        """The console's session secret named by ``[serve] session_secret_env`` (None: not
        named, so ``underway serve`` makes a random one)."""
        name = self.serve.session_secret_env
        if name is None:
            return None
        key = "serve.session_secret_env"
        value = self._secret(os.environ if environ is None else environ, key, name)
        if len(value) < MIN_SESSION_SECRET:
            raise self._error(key, f"the environment variable {name} holds "
                              f"{len(value)} characters; a session secret needs at least "
                              f"{MIN_SESSION_SECRET}")
        return value.encode()

    def metrics_token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The token ``/metrics`` asks for, named by ``[serve] metrics_token_env`` (None:
        not named, so ``/metrics`` is open)."""
        name = self.serve.metrics_token_env
        if name is None:
            return None
        return self._secret(os.environ if environ is None else environ,
                            "serve.metrics_token_env", name)

    def worker_metrics_token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The token the worker's metrics ask for, named by ``[telemetry]
        metrics_token_env`` (None: not named, so they are open)."""
        name = self.telemetry.metrics_token_env
        if name is None:
            return None
        return self._secret(os.environ if environ is None else environ,
                            "telemetry.metrics_token_env", name)

    def _secret(self, env: Mapping[str, str], key: str, name: str) -> str:
        value = env.get(name)
        if not value:
            state = "is empty" if value == "" else "is not set"
            raise self._error(key, f"the environment variable {name} {state}")
        return value

    def make_secrets(
        self, *, environment: str, env_prefix: str | None,
        environ: Mapping[str, str] | None = None,
    ) -> SecretProvider | None:
        """The tools' secret provider for a worker in ``environment``.

        It reads environment variables. ``[secrets]`` binds them to the environments that may
        read them.

        Args:
            environment: The worker's environment.
            env_prefix: The variables' prefix. None: no provider, unless ``[secrets]`` binds
                secrets to environments, which reads them without a prefix.
            environ: The variables; None means ``os.environ``.
        """
        bound = self.secrets.environments or self.secrets.default is not None
        if env_prefix is None and not bound:
            return None
        provider = EnvSecrets(prefix=env_prefix or "", environ=environ)
        if not bound:
            return provider
        return BoundSecrets(provider, self.secrets.environments, environment=environment,
                            default=self.secrets.default)

    def make_key_provider(self) -> KeyProvider | None:
        """The key provider ``[encryption]`` names (None: encryption is off): the keyring
        file opened (refused when others may read it), the KEK read from its variable, or
        the provider the factory returns."""
        enc = self.encryption
        if enc is None:
            return None
        try:
            if enc.provider == "keyring":
                assert enc.keyring is not None
                return KeyringFile(enc.keyring, subjects=enc.subjects)
            if enc.provider == "env":
                return EnvKey(enc.env, previous=enc.previous_env, subjects=enc.subjects)
            assert enc.factory is not None
            module, _, attribute = enc.factory.partition(":")
            factory = getattr(importlib.import_module(module), attribute)
            found = factory()
        except ConfigurationError as exc:
            raise self._error(f"encryption.{enc.provider}", str(exc)) from None
        except (ImportError, AttributeError, ValueError) as exc:
            raise self._error("encryption.factory",
                              f"cannot load {enc.factory!r}: {exc}") from None
        if not all(hasattr(found, n) for n in ("kek_id", "wrap", "unwrap")):
            raise self._error("encryption.factory", f"{enc.factory!r} returned "
                              f"{type(found).__name__}, not a key provider (kek_id, wrap, "
                              "unwrap)")
        provider: KeyProvider = found
        return provider
    def open_store(self, *, migrate: bool = True) -> Store | None:
        """The store the file names: a :class:`~underway.store.regional.RegionalStore` over
        every region's database for ``[residency]``, else the ``database``, else None —
        with encryption on when ``[encryption]`` is given. Each database is migrated unless
        ``migrate=False``; the caller closes the store."""
        store = self._open_store(migrate)
        if store is not None and self.encryption is not None:
            try:
                provider = self.make_key_provider()
                assert provider is not None
                encrypt(store, provider, refresh=self.encryption.refresh)
            except BaseException:
                store.close()
                raise
        if store is not None:
            store.codec.max_value_bytes = self.blobs.max_value_bytes
            store.codec.chunk_bytes = self.blobs.chunk_bytes
        return store

    def _open_store(self, migrate: bool) -> Store | None:
        if self.residency is None:
            return None if self.database is None else connect(self.database, migrate=migrate)
        opened: dict[str, Store] = {}
        try:
            for region, url in self.residency.regions.items():
                opened[region] = connect(url, migrate=migrate)
            return self.regional_store(opened)
        except BaseException:
            for store in opened.values():
                store.close()
            raise

    def regional_store(self, regions: Mapping[str, Store]) -> RegionalStore:
        """The ``[residency]`` over ``regions``, the stores of its regions (opened by the
        caller, closed with the regional store)."""
        if self.residency is None:
            raise self._error("residency", "the file has no [residency] table")
        return RegionalStore(regions, tenants=self.residency.tenants,
                             default=self.residency.default)

    def make_tenant_budget(self) -> TenantBudgets | None:
        """The ``[budgets]``: a default for every tenant and each named tenant's own."""
        if self.budgets is None:
            return None
        return TenantBudgets(
            default=None if self.budgets.default is None else _budget(self.budgets.default),
            tenants={t: _budget(b) for t, b in self.budgets.tenants.items()},
        )

    def make_policy(self) -> Policy | None:
        """The policy the ``[policy]`` file holds (its errors name that file, the rule and
        the field)."""
        return None if self.policy is None else policies.load_policy(self.policy.file)

    def make_guard_options(
        self, *, environment: str | None = None, policy_file: str | None = None,
        secrets_env_prefix: str | None = None, signed_resolutions: bool = False,
        notify: bool = True,
    ) -> GuardOptions:
        """The guard a worker runs with: ``[policy]``, ``[budgets]``, ``[worker]``
        environment and secrets prefix, ``[secrets]`` bindings, ``[approvals]`` and the
        ``[notifier]``. ``underway worker`` and ``underway replay`` both build their guard
        here, so a replay decides calls as the worker did. ``underway deploy check`` reads it
        too, so a file the worker would refuse fails the check.

        Args:
            environment: In place of ``worker.environment``.
            policy_file: A policy file in place of ``[policy]``.
            secrets_env_prefix: In place of ``worker.secrets_env_prefix``.
            signed_resolutions: Require signed resolutions even when the file does not.
            notify: Build the notifier. A replay tells nobody, so it passes False.
        """
        env = environment or self.worker.environment or DEFAULT_ENVIRONMENT
        policy = (policies.load_policy(policy_file) if policy_file is not None
                  else self.make_policy())
        prefix = secrets_env_prefix or self.worker.secrets_env_prefix
        return GuardOptions(
            policy=policy, environment=env, tenant_budget=self.make_tenant_budget(),
            secrets=self.make_secrets(environment=env, env_prefix=prefix),
            notifier=self.make_notifier() if notify else None,
            signed_resolutions=signed_resolutions or self.approvals.signed_resolutions,
        )

    def make_span_exporter(self, section: TelemetrySection | None = None
                           ) -> SpanExporter | None:
        """The OpenTelemetry SDK exporter ``[telemetry]`` names (``otlp`` when traces are
        on and no exporter is named); None when traces are off. Needs the ``otel``
        extra.

        Args:
            section: The ``[telemetry]`` section with the command line's overrides
                (None: the file's).
        """
        t = self.telemetry if section is None else section
        if not t.traces:
            return None
        try:
            return telemetry.span_exporter(
                t.exporter or "otlp", endpoint=None if t.endpoint is None else str(t.endpoint),
                protocol=t.protocol)
        except ConfigurationError as exc:
            raise self._error("telemetry.exporter", str(exc)) from None

    def make_anchoring(self) -> Anchoring | None:
        """The ``[anchoring]``: its key loaded, its log opened."""
        a = self.anchoring
        if a is None:
            return None
        try:
            key = load_private_key(a.key)
        except ConfigurationError as exc:
            raise self._error("anchoring.key", str(exc)) from None
        return Anchoring(key=key, sink=FileAnchorLog(a.log), every=a.every)


    def make_retention(self) -> Retention | None:
        """The ``[retention]`` rules (None: no such table, so nothing is ever purged)."""
        r = self.retention
        if r is None:
            return None
        if math.isinf(r.every):
            raise self._error("retention.every", "must be a period such as \"1h\", not "
                              "\"never\" (leave [retention] out to sweep nothing)")
        return Retention(
            completed=r.completed, failed=r.failed, cancelled=r.cancelled,
            forget_after=r.forget_after,
            flows={f: Periods(**_periods(p)) for f, p in r.flows.items()},
            tenants={t: _rules(x) for t, x in r.tenants.items()}, every=r.every,
        )


def _periods(p: PeriodsSection) -> dict[str, float | None]:
    return {"completed": p.completed, "failed": p.failed, "cancelled": p.cancelled,
            "forget_after": p.forget_after}


def _rules(t: TenantRetentionSection) -> Rules:
    return Rules(**_periods(t), flows={f: Periods(**_periods(p)) for f, p in t.flows.items()})


def _budget(b: BudgetSection) -> Budget:
    return Budget(tokens=b.tokens, cost_usd=b.cost_usd, model_calls=b.model_calls,
                  tool_calls=b.tool_calls, wall_clock_s=b.wall_clock_s, messages=b.messages,
                  money=b.money, on_exceed=b.on_exceed)


def find_config(path: str | os.PathLike[str] | None) -> Path | None:
    """The config file to read: ``path`` when given (it must exist: :func:`load_config`
    says so), else ``underway.toml`` in the current directory if there is one, else
    None."""
    if path is not None:
        return Path(path)
    default = Path(DEFAULT_FILE)
    return default if default.is_file() else None


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check the config file ``path``. Relative paths in it (the policy file,
    the anchoring key and log, a SQLite database) are relative to its directory.

    Raises :class:`ConfigError` naming the file, each offending key and what is wrong:
    a missing or unreadable file, invalid TOML, an unknown key, a value of the wrong type
    or out of range, a policy or key file that does not exist.
    """
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(source, "", "no such file") from None
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read it: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(source, "", f"not valid TOML: {exc}") from None
    base = os.path.dirname(os.path.abspath(path))
    try:
        config = Config.model_validate(data, context={BASE: base})
    except ValidationError as exc:
        problems = [_problem(e) for e in exc.errors()]
        error = ConfigError(source, *problems[0])
        if len(problems) > 1:
            error.args = ("; ".join(
                [str(error), *(f"{k}: {p}" if k else p for k, p in problems[1:])]),)
        raise error from None
    config._source = source
    return config


# -- turning pydantic's errors into a key and a problem ------------------------------------

_TOML_TYPES = {str: "a string", int: "an integer", float: "a float", bool: "a boolean",
               dict: "a table", list: "an array"}


def _key(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("_", "").replace("-", "").isalnum():
            out += f".{part}" if out else part
        else:
            out += f'."{part}"' if out else f'"{part}"'
    return out


_EXPECTED = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
             "bool_type": "true or false", "list_type": "an array", "dict_type": "a table",
             "model_type": "a table", "model_attributes_type": "a table"}


def _problem(error: Any) -> tuple[str, str]:
    loc: tuple[int | str, ...] = tuple(error["loc"])
    kind, value = error["type"], error.get("input")
    if kind == "extra_forbidden":
        known = _known_keys(loc[:-1])
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
        more = (f" (did you mean {hint[0]!r}?)" if hint
                else f" (known keys: {', '.join(known)})" if known else "")
        return _key(loc), f"unknown key{more}"
    if kind == "missing":
        return _key(loc), "missing (it is required)"
    if kind in _EXPECTED:
        got = _toml_type(value)
        shown = "" if isinstance(value, dict | list) else f" {value!r}"
        return _key(loc), f"must be {_EXPECTED[kind]}, not {got}{shown}"
    if kind == "too_short":
        return _key(loc), "must not be empty"
    message = str(error["msg"]).removeprefix("Value error, ")
    message = message.replace("Input should be", "must be")
    if kind == "literal_error" or "than" in kind:
        message += f", not {value!r}"
    return _key(loc), message


def _toml_type(value: object) -> str:
    return next((name for t, name in _TOML_TYPES.items() if type(value) is t),
                type(value).__name__)


def _known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table at ``loc`` may hold (none when it is not a fixed table)."""
    kind: Any = Config
    for part in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            if field is None:
                return []
            kind = field.annotation
        elif typing.get_origin(kind) in (dict, list):
            kind = typing.get_args(kind)[-1]
        else:
            return []
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _unwrap(kind: Any) -> Any:
    """``X`` from ``X | None`` and ``Annotated[X, ...]``."""
    while True:
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            if len(args) != 1:
                return kind
            kind = args[0]
        else:
            return kind
