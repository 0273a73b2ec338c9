"""The error a model adapter raises when the provider refuses or fails a request."""

from __future__ import annotations

from ..errors import UnderwayError

__all__ = ["ModelError"]


class ModelError(UnderwayError):
    """A model call failed: the provider refused it, or kept failing until retries ran out.

    Args:
        provider: The provider called.
        model: The model called.
        status: The HTTP status; None for a connection error or timeout.
        provider_message: The provider's own explanation.
        retryable: Whether trying again later may help (rate limits, 5xx, timeouts).
        retry_after: The wait in seconds the provider last asked for, if it did.
        attempts: How many requests were sent.
    """

    def __init__(
        self,
        provider: str,
        model: str,
        *,
        status: int | None,
        provider_message: str,
        retryable: bool,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        what = f"HTTP {status}" if status is not None else "no HTTP response"
        tries = "attempt" if attempts == 1 else "attempts"
        hint = (
            "retryable: try again later or allow more attempts"
            if retryable
            else "not retryable: fix the request, model id or credentials"
        )
        super().__init__(
            f"{provider} model {model!r} failed after {attempts} {tries}: "
            f"{what}: {provider_message} ({hint})"
        )
        self.provider = provider
        self.model = model
        self.status = status
        self.provider_message = provider_message
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts = attempts
