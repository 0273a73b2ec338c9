"""Retry policies (exponential backoff with full jitter) and circuit-breaker settings.

A retry never sleeps in a worker: the wait before the next attempt is a durable timer, so a
run whose tool is failing holds no worker, memory or connection while it backs off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ConfigurationError


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a tool call is retried.

    Attempt ``n`` (the first retry is attempt 2) waits ``min(max_interval, initial_interval *
    backoff ** (n - 2))`` seconds, scaled by a random factor in [0, 1) when ``jitter`` is on
    ("full jitter"). Errors whose type name is in ``non_retryable``, errors raised with a
    ``retryable = False`` attribute, schema violations and open circuits are never retried.

    When the failed service said how long to wait (``Retry-After``, carried as the error's
    ``retry_after``), that wait is used instead, without jitter (waiting less would only be
    refused again), bounded by ``max_retry_after`` seconds.
    """

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    jitter: bool = True
    non_retryable: tuple[str, ...] = ()
    max_retry_after: float = 3600.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if self.initial_interval < 0 or self.max_interval < 0:
            raise ConfigurationError("retry intervals must not be negative")
        if self.backoff < 1:
            raise ConfigurationError(f"backoff must be at least 1, not {self.backoff}")
        if not self.max_retry_after >= 0:
            raise ConfigurationError("max_retry_after must not be negative")

    def delay(self, attempt: int, rnd: float, *, hint: float | None = None) -> float:
        """Seconds to wait before ``attempt``.

        Args:
            attempt: The attempt about to be made (2, 3, …).
            rnd: A number in [0, 1), for the jitter.
            hint: The wait the service asked for (an error's ``retry_after``), if any.
        """
        if hint is not None and math.isfinite(hint):
            return min(self.max_retry_after, max(0.0, hint))
        base = min(self.max_interval, self.initial_interval * self.backoff ** max(0, attempt - 2))
        return base * rnd if self.jitter else base

    def retries(self, error_type: str, retryable: bool) -> bool:
        """Whether an error of this kind may be retried at all."""
        return retryable and error_type not in self.non_retryable


@dataclass(frozen=True, slots=True, kw_only=True)
class CircuitBreaker:
    """After ``failure_threshold`` consecutive failures the circuit opens for ``cooldown``
    seconds: calls fail fast with ``CircuitOpen``. Then one trial call is let through (half
    open): success closes the circuit, failure opens it again. ``per_tenant`` keeps one
    circuit per tenant instead of one for all. The state lives in the store, shared by every
    worker."""

    failure_threshold: int = 5
    cooldown: float = 30.0
    per_tenant: bool = False

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ConfigurationError("failure_threshold must be at least 1")
        if self.cooldown <= 0:
            raise ConfigurationError("cooldown must be positive")

    def scope(self, tenant_id: str) -> str:
        """The tenant whose circuit a call uses (``*`` for one shared circuit)."""
        return tenant_id if self.per_tenant else "*"


__all__ = [
    "CircuitBreaker",
    "RetryPolicy",
]
