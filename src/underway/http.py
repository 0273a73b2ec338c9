"""A small HTTP helper for tools that call outside services with their idempotency key.

:func:`request` sends ``Idempotency-Key: <call key>`` (the same on every attempt of one
call, new for each call) and ``Underway-Fence: <lease token>`` so that a service which
deduplicates by key performs the effect once even when underway must retry after a crash,
and a service that remembers the highest fence it saw can refuse a stale worker.
It uses only the standard library and runs the blocking request on a thread.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from .effects import CallInfo
from .events import JSON
from .secrets import mask


class HTTPError(Exception):
    """The service answered with an error status. ``retryable`` for 408, 425, 429 and 5xx,
    which the engine's retry policy honours."""

    def __init__(self, status: int, body: str, url: str) -> None:
        super().__init__(f"{url} answered {status}: {body[:300]}")
        self.status = status
        self.body = body
        self.retryable = status in (408, 425, 429) or status >= 500


@dataclass(frozen=True, slots=True)
class Response:
    """A successful response: status, headers and the decoded JSON body (None if empty)."""

    status: int
    headers: Mapping[str, str]
    body: JSON


async def request(
    method: str,
    url: str,
    *,
    info: CallInfo,
    json_body: JSON = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> Response:
    """Send one request carrying the call's idempotency key and fence; raise
    :class:`HTTPError` on a 4xx/5xx answer. Secret values never appear in the error."""
    data = None if json_body is None else json.dumps(json_body).encode("utf-8")
    all_headers = {
        "Idempotency-Key": info.key,
        "Underway-Fence": str(info.fence),
        "Accept": "application/json",
        **({"Content-Type": "application/json"} if data is not None else {}),
        **(headers or {}),
    }
    req = urllib.request.Request(url, data=data, method=method.upper(), headers=all_headers)

    def send() -> Response:
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read().decode("utf-8")
                body = json.loads(raw) if raw.strip() else None
                return Response(resp.status, dict(resp.headers.items()), body)
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")
            raise HTTPError(exc.code, mask(text, info.secrets), url) from None

    return await asyncio.to_thread(send)
