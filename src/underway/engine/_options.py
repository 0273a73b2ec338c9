"""An engine's settings as frozen option objects, and the keywords that build them.

:class:`EngineOptions` holds the engine's own settings. The guard's are a
:class:`~underway.guard.GuardOptions`. ``Engine(options=..., guard_options=...)`` takes
them whole. The keywords of ``Engine(...)`` are a convenience: :func:`settle` turns them
into the two objects, in this one place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ..errors import ConfigurationError
from ..guard import GuardOptions
from ..hooks import DEFAULT_HOOK_TIMEOUT
from ..store.leases import MAX_LEASE_TTL

if TYPE_CHECKING:
    from ..guard.approvals.notify import Notifier
    from ..guard.budgets import Budget, TenantBudgets
    from ..guard.policy import Policy
    from ..secrets import SecretProvider
    from ..telemetry import Metrics


def checked_ttl(ttl: float) -> float:
    """``ttl`` as a lease's length, when it can be one (else a clear error)."""
    if not 0 < ttl <= MAX_LEASE_TTL:
        raise ConfigurationError(
            f"lease_ttl {ttl!r}: a lease lasts more than 0 and at most {MAX_LEASE_TTL:g} "
            "seconds (a longer one would look taken by no worker)")
    return ttl


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """An engine's own settings (``Engine(options=...)``).

    The engine's keywords of the same names build one. The engine's attributes of the
    same names read them.
    """

    owner: str | None = None
    """Who the engine's leases are held by (None: this process, by host and pid)."""
    lease_ttl: float = 30.0
    """Seconds a lease lasts unless renewed. Heartbeats renew it while a step runs."""
    checkpoint_every: int = 100
    """Write a checkpoint at least every this many events. A run that leaves the worker
    always gets one."""
    retry_budget: int | None = 100
    """Retries one run may spend across all its tools before it stops dead (None: no
    limit)."""
    metrics: Metrics | None = None
    """Where steps, calls, activations and run ends are reported (None: nowhere, at no
    cost)."""
    group_commit: bool = True
    """Write the commits of concurrent activations together, in one transaction
    (:mod:`underway.engine._group`). False writes each on its own."""
    notify_timeout: float = DEFAULT_HOOK_TIMEOUT
    """Seconds the notifier may take. Past them, or raising, it is logged; the run waits
    in the inbox all the same."""

    def __post_init__(self) -> None:
        checked_ttl(self.lease_ttl)


class EngineKeywords(TypedDict, total=False):
    """The keywords of ``Engine(...)`` that build its option objects: the fields of
    :class:`EngineOptions` and of :class:`~underway.guard.GuardOptions`."""

    owner: str | None
    lease_ttl: float
    checkpoint_every: int
    retry_budget: int | None
    metrics: Metrics | None
    group_commit: bool
    notify_timeout: float
    policy: Policy | None
    environment: str | None
    budget: Budget | None
    tenant_budget: Budget | TenantBudgets | None
    shadow: bool | None
    secrets: SecretProvider | None
    notifier: Notifier | None
    signed_resolutions: bool | None


def settle(
    options: EngineOptions | None, guard_options: GuardOptions | None,
    keywords: Mapping[str, Any],
) -> tuple[EngineOptions, GuardOptions]:
    """The engine's option objects, from those given and from its keywords.

    An option object given whole is the setting. A keyword beside it must agree with
    it. Without one, the keywords build it.

    Args:
        options: The engine's options, if given whole.
        guard_options: The guard's options, if given whole.
        keywords: The keywords ``Engine(...)`` was given besides.

    Raises:
        ConfigurationError: A keyword disagrees with the option object given; the error
            names the field.
        TypeError: A keyword is no field of either option object.
    """
    known = _names(EngineOptions) | _names(GuardOptions)
    unknown = sorted(set(keywords) - known)
    if unknown:
        raise TypeError(f"Engine() got an unexpected keyword argument {unknown[0]!r}")
    return (_built(EngineOptions, options, keywords, "options"),
            _built(GuardOptions, guard_options, keywords, "guard_options"))


_O = TypeVar("_O", EngineOptions, GuardOptions)


def _names(cls: type[EngineOptions | GuardOptions]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _built(cls: type[_O], given: _O | None, keywords: Mapping[str, Any], name: str) -> _O:
    """``given``, checked against the keywords of its fields; else built from them."""
    said = {k: v for k, v in keywords.items() if k in _names(cls)}
    if given is None:
        return cls(**said)
    for field, value in said.items():
        held = getattr(given, field)
        if held is not value and held != value:
            raise ConfigurationError(
                f"{field} is given twice, as {field}={value!r} and in {name}= "
                f"({cls.__name__}.{field}={held!r}); give it once")
    return given
