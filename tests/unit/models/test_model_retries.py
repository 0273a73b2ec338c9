"""How a provider's answer decides whether and when a model call is tried again."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from underway.models.errors import ModelError
from underway.models.retries import redactor, retry_after_seconds, status_failure


def test_retry_after_in_seconds_milliseconds_or_as_a_date() -> None:
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    now = 1_700_000_000.0
    date = formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=now) == pytest.approx(30)
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize(("status", "retryable"), [
    (400, False), (401, False), (403, False), (404, False), (422, False),
    (408, True), (409, True), (429, True), (500, True), (503, True), (529, True),
])
def test_which_statuses_are_retried(status: int, retryable: bool) -> None:
    assert status_failure(status, {}, "x").retryable is retryable


def test_the_provider_may_overrule_the_status() -> None:
    assert status_failure(500, {"x-should-retry": "false"}, "x").retryable is False
    assert status_failure(400, {"x-should-retry": "true"}, "x").retryable is True


def test_keys_are_redacted_whole_or_by_their_tail() -> None:
    redact = redactor("sk-proj-0123456789abcdefXYZ")
    assert redact("bad key sk-proj-0123456789abcdefXYZ") == "bad key ***"
    assert redact("key ending in ...bcdefXYZ") == "key ending in ...***"
    assert redactor(None)("unchanged") == "unchanged"


def test_model_error_says_what_failed_and_whether_to_retry() -> None:
    err = ModelError("openai", "gpt-4o-mini", status=429, provider_message="slow down",
                     retryable=True, retry_after=20.0, attempts=4)
    assert str(err) == (
        "openai model 'gpt-4o-mini' failed after 4 attempts: HTTP 429: slow down "
        "(retryable: try again later or allow more attempts)"
    )
    lost = ModelError("anthropic", "claude", status=None, provider_message="Connection error.",
                      retryable=True)
    assert "no HTTP response" in str(lost) and "1 attempt:" in str(lost)
