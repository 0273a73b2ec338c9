"""How an adapter retries a provider call: the only retry policy in play, and an observable one.

The SDKs' own retries are switched off (``max_retries=0``). A rate limit (429), a timeout
(408), a conflict (409), a server error (5xx), a dropped connection or a timeout is retried
with exponential back-off and full jitter (:class:`underway.retry.RetryPolicy`), waiting
exactly as long as the provider's ``Retry-After`` asks when it does. Other statuses (400,
401, 403, 404, 422, ...) raise a :class:`ModelError` at once. A provider that asks for a
longer wait than ``max_retry_after`` is not waited for in-process: the error is raised with
``retryable=True`` and ``retry_after`` set, for a durable retry to pick up.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..retry import RetryPolicy
from .errors import ModelError

__all__ = ["DEFAULT_RETRY", "RetryNotice"]

log = logging.getLogger("underway.models")

DEFAULT_RETRY = RetryPolicy(max_attempts=4, initial_interval=1.0, backoff=2.0, max_interval=30.0)
"""Four attempts, waiting up to 1, 2 and 4 seconds (full jitter) between them."""

_RETRYABLE_STATUS = frozenset({408, 409, 429})

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """Handed to an adapter's ``on_retry`` hook before it waits and sends the request again."""

    provider: str
    model: str
    attempt: int
    """The attempt that failed (1 for the first request)."""
    wait: float
    """Seconds until the next attempt."""
    status: int | None
    message: str
    retry_after: float | None


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as the retry loop sees it."""

    status: int | None
    message: str
    retryable: bool
    retry_after: float | None = None


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, or ``Retry-After`` in seconds or as
    an HTTP date. ``None`` when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def status_failure(status: int, headers: Mapping[str, str], message: str) -> Failure:
    """Classify an HTTP error response."""
    retryable = status in _RETRYABLE_STATUS or status >= 500
    # Providers may say better than the status whether a retry can help.
    should = headers.get("x-should-retry")
    if should in ("true", "false"):
        retryable = should == "true"
    return Failure(status, message, retryable, retry_after_seconds(headers))


def provider_message(body: object, fallback: str) -> str:
    """The human explanation inside a provider's JSON error body (both providers nest it
    under ``error.message``), else ``fallback``."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


@dataclass(frozen=True, slots=True, kw_only=True)
class Retrier:
    """Sends one request under a retry policy and turns failures into :class:`ModelError`."""

    provider: str
    model: str
    policy: RetryPolicy
    max_retry_after: float
    sleep: Callable[[float], Awaitable[None]]
    jitter: Callable[[], float]
    on_retry: Callable[[RetryNotice], None] | None
    classify: Callable[[Exception], Failure | None]
    redact: Callable[[str], str]

    async def run(self, send: Callable[[], Awaitable[_T]]) -> tuple[_T, int]:
        """The result of ``send()`` and how many attempts it took."""
        attempt = 1
        while True:
            try:
                return await send(), attempt
            except Exception as exc:
                failure = self.classify(exc)
                if failure is None:
                    raise
                wait = self._wait(failure, attempt)
                if wait is None:
                    raise self._error(failure, attempt) from exc
            notice = RetryNotice(
                self.provider, self.model, attempt, wait, failure.status,
                self.redact(failure.message), failure.retry_after,
            )
            log.warning(
                "%s model %r: %s; retrying in %.2fs (attempt %d of %d)",
                self.provider, self.model,
                f"HTTP {failure.status}" if failure.status is not None else notice.message,
                wait, attempt + 1, self.policy.max_attempts,
            )
            if self.on_retry is not None:
                self.on_retry(notice)
            await self.sleep(wait)
            attempt += 1

    def _wait(self, failure: Failure, attempt: int) -> float | None:
        """Seconds before the next attempt, or ``None`` to give up now."""
        status = "" if failure.status is None else str(failure.status)
        if not self.policy.retries(status, failure.retryable):
            return None
        if attempt >= self.policy.max_attempts:
            return None
        if failure.retry_after is not None:
            return None if failure.retry_after > self.max_retry_after else failure.retry_after
        return self.policy.delay(attempt + 1, self.jitter())

    def _error(self, failure: Failure, attempts: int) -> ModelError:
        return ModelError(
            self.provider, self.model, status=failure.status,
            provider_message=self.redact(failure.message), retryable=failure.retryable,
            retry_after=failure.retry_after, attempts=attempts,
        )


def redactor(secret: str | None) -> Callable[[str], str]:
    """A function that blanks ``secret`` (and any 8+ character tail of it) out of text."""
    if not secret:
        return lambda text: text

    def redact(text: str) -> str:
        text = text.replace(secret, "***")
        # Providers echo keys masked at the front ("sk-...abcd1234"): hide long tails too.
        tail = secret[-8:]
        return text.replace(tail, "***") if len(secret) > 16 else text

    return redact


def sdk_failure(exc: Exception, *, status_error: type[Any], connection_error: type[Any]) -> (
    Failure | None
):
    """Classify an exception raised by the ``openai`` or ``anthropic`` SDK (their error
    classes share one design); ``None`` for anything else."""
    if isinstance(exc, status_error):
        response = exc.response
        fallback = f"{exc.message}"
        return status_failure(
            int(exc.status_code), response.headers, provider_message(exc.body, fallback)
        )
    if isinstance(exc, connection_error):
        cause = exc.__cause__
        detail = f"{exc.message} ({type(cause).__name__}: {cause})" if cause else exc.message
        return Failure(None, str(detail), True)
    return None
