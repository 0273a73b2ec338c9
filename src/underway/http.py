"""A small HTTP helper for tools that call outside services with their idempotency key.

:func:`request` sends ``Idempotency-Key: <call key>`` (the same on every attempt of one
call, new for each call) and ``Underway-Fence: <lease token>`` so that a service which
deduplicates by key performs the effect once even when underway must retry after a crash,
and a service that remembers the highest fence it saw can refuse a stale worker.

It records what the response says, and nothing more or less:

* a 2xx answer is a success whatever its body: JSON is decoded, anything else is kept as
  text with its content type (the effect happened; a body we cannot parse does not undo it);
* a 4xx/5xx answer raises :class:`HTTPError`, ``retryable`` for 408, 425, 429 and 5xx, with
  the ``Retry-After`` the service sent (seconds or an HTTP date) as ``retry_after``;
* a failure before the request left (DNS, connection refused, connect timeout) raises the
  ``httpx`` error: nothing was sent;
* a mutating request (any method but GET, HEAD, OPTIONS, TRACE) whose answer was lost after
  it was sent — a reset, a read error, a malformed answer, a read timeout — raises
  :class:`~underway.errors.OutcomeUnknown`: the effect may have happened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx

from .effects import CallInfo
from .errors import OutcomeUnknown
from .events import JSON
from .secrets import mask

__all__ = ["HTTPError", "Response", "request"]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""Methods that change nothing on the server (RFC 9110): losing their answer loses nothing."""

# Errors raised once the request may have reached the server. (A connect error, a connect
# timeout or a pool timeout happen before anything is sent.)
_AFTER_SENDING = (
    httpx.ReadError, httpx.WriteError, httpx.ReadTimeout, httpx.WriteTimeout,
    httpx.RemoteProtocolError,
)


class HTTPError(Exception):
    """The service answered with an error status. ``retryable`` for 408, 425, 429 and 5xx,
    which the engine's retry policy honours; ``retry_after`` is the wait in seconds the
    service asked for with ``Retry-After`` (None when it sent none, or nothing readable)."""

    def __init__(
        self, status: int, body: str, url: str, *, retry_after: float | None = None,
        content_type: str | None = None,
    ) -> None:
        super().__init__(f"{url} answered {status}: {body[:300]}")
        self.status = status
        self.body = body
        self.url = url
        self.content_type = content_type
        self.retryable = status in (408, 425, 429) or status >= 500
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Response:
    """A successful (2xx) response.

    ``body`` is the decoded JSON when the response is JSON, else the body's text (None when
    the body is empty); ``text`` is always the body as text, ``content_type`` the media type
    the service declared, and ``is_json`` says which of the two ``body`` is.
    """

    status: int
    headers: Mapping[str, str]
    body: JSON
    text: str = ""
    content_type: str | None = None
    is_json: bool = False

    def record(self) -> dict[str, JSON]:
        """What the response said, as plain JSON a tool can return to be journaled."""
        return {"status": self.status, "content_type": self.content_type, "body": self.body}


async def request(
    method: str,
    url: str,
    *,
    info: CallInfo,
    json_body: JSON = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    client: httpx.AsyncClient | None = None,
) -> Response:
    """Send one request carrying the call's idempotency key and fence; see the module
    docstring for what each outcome raises. Secret values never appear in an error.
    ``client`` reuses a client of your own (its connection pool, transport, TLS settings)."""
    verb = method.upper()
    all_headers = {
        "Idempotency-Key": info.key,
        "Underway-Fence": str(info.fence),
        "Accept": "application/json",
        **(headers or {}),
    }
    data = None if json_body is None else json.dumps(json_body).encode("utf-8")
    if data is not None:
        all_headers.setdefault("Content-Type", "application/json")
    own = client is None
    http = client if client is not None else httpx.AsyncClient(follow_redirects=True)
    try:
        resp = await http.request(verb, url, content=data, headers=all_headers, timeout=timeout)
    except _AFTER_SENDING as exc:
        if verb in SAFE_METHODS:
            raise
        raise OutcomeUnknown(
            f"{verb} {url}: the request was sent but its answer was lost "
            f"({type(exc).__name__}: {mask(str(exc), info.secrets)}); it may have taken effect",
            method=verb, url=url,
        ) from None
    finally:
        if own:
            await http.aclose()
    text = resp.text
    content_type = _media_type(resp.headers.get("content-type"))
    if resp.status_code >= 400:
        raise HTTPError(
            resp.status_code, mask(text, info.secrets), url,
            retry_after=retry_after_seconds(resp.headers.get("retry-after")),
            content_type=content_type,
        )
    body, is_json = _decode(text, content_type)
    return Response(resp.status_code, dict(resp.headers.items()), body, text, content_type,
                    is_json)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait that a ``Retry-After`` header asks for: a number of seconds or an
    HTTP date (a date in the past means now: 0). None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        at = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:
        return None
    return max(0.0, at.timestamp() - (time.time() if now is None else now))


def _media_type(header: str | None) -> str | None:
    if header is None:
        return None
    media = header.split(";", 1)[0].strip().lower()
    return media or None


def _decode(text: str, content_type: str | None) -> tuple[JSON, bool]:
    """The body as JSON when the service says it is JSON (or says nothing and it parses),
    else as text."""
    if not text.strip():
        return None, False
    jsonish = content_type is None or content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )
    if jsonish:
        try:
            return json.loads(text, parse_constant=_not_json), True
        except ValueError:
            pass
    return text, False


def _not_json(name: str) -> None:
    # NaN and Infinity parse in Python but are not JSON: such a body is kept as text.
    raise ValueError(f"{name} is not JSON")
