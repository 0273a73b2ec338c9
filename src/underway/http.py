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

:meth:`Response.expect` reads a 2xx body as the model the tool expects, and says so
loudly when it is not that: truncated JSON, a missing field, or a ``200 OK`` whose body is
an error raise :class:`ResponseInvalid` — for a mutating request an
:class:`~underway.errors.OutcomeUnknown` too (the service acted; what it answered is
lost), so the engine settles it by the idempotency key instead of running it again.

Egress: when the calling tool declares the hosts it may reach (``@tool(hosts=[...])``),
a request to any other host — first or after a redirect — raises
:class:`~underway.errors.EgressDenied` before anything is sent, and the engine journals
the refusal. A 401 answer is an :class:`HTTPError` with ``credentials_rejected``: the
engine refreshes the tool's secrets and tries once more (see :mod:`underway.secrets`).

:func:`install_interceptor` puts a function between every request and the network (what
``underway drill`` uses to answer for a service: a partial answer, a refused credential).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from .effects import CallInfo
from .errors import OutcomeUnknown, UnderwayError
from .events import JSON
from .lost_track import lost_track
from .secrets import mask

__all__ = ["HTTPError", "Interceptor", "Response", "ResponseInvalid", "install_interceptor",
           "request"]

M = TypeVar("M", bound=BaseModel)

Send = Callable[[httpx.Request], Awaitable[httpx.Response]]
Interceptor = Callable[[httpx.Request, CallInfo, Send], Awaitable[httpx.Response]]
"""``interceptor(request, info, send)``: answers ``request`` of the call ``info``, by
``await send(request)`` (the network) or with a response of its own."""

_interceptor: Interceptor | None = None
MAX_REDIRECTS = 20

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""Methods that change nothing on the server (RFC 9110): losing their answer loses nothing."""



class HTTPError(UnderwayError):
    """The service answered with an error status.

    ``retryable`` for 408, 425, 429 and 5xx, which the engine's retry policy honours.

    Args:
        status: The HTTP status.
        body: The answer's body.
        url: The URL asked.
        retry_after: The wait in seconds the service asked for with ``Retry-After``. None
            when it sent none, or nothing readable.
        content_type: The answer's ``Content-Type``, if any.
    """

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
        self.credentials_rejected = status == 401
        """The service refused the credentials (401): the engine refreshes the tool's
        secrets and tries once more."""


class ResponseInvalid(UnderwayError):
    """A 2xx answer whose body is not what the tool expects (:meth:`Response.expect`).

    It is not JSON, cut short, missing a field, or an error reported with a success status.
    ``retryable``: asking again may help (a safe request). For a mutating request the error
    is also an :class:`~underway.errors.OutcomeUnknown` (see :func:`invalid`).

    Args:
        message: What is wrong with the body.
        method: The request's HTTP method.
        url: The URL asked.
    """

    retryable = True

    def __init__(self, message: str, *, method: str, url: str) -> None:
        super().__init__(message)
        self.method = method
        self.url = url


class MutationAnswerInvalid(ResponseInvalid, OutcomeUnknown):
    """A mutating request's 2xx answer is unreadable: the service acted, the result is
    lost, so the outcome is settled by the idempotency key (reconcile, or the same key
    again), never by running the effect anew."""

    def __init__(self, message: str, *, method: str, url: str) -> None:
        ResponseInvalid.__init__(self, message, method=method, url=url)


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
    method: str = "GET"
    url: str = ""

    def record(self) -> dict[str, JSON]:
        """What the response said, as plain JSON a tool can return to be journaled."""
        return {"status": self.status, "content_type": self.content_type, "body": self.body}

    def expect(self, model: type[M]) -> M:
        """The body read as ``model``; :class:`ResponseInvalid` naming what is wrong when
        it is not JSON (truncated, text) or does not fit (a field missing, an error body
        sent with a success status). After a mutating request the error is also an
        :class:`~underway.errors.OutcomeUnknown`: the effect happened, its answer is lost."""
        where = f"{self.method} {self.url} answered {self.status}"
        if not self.is_json:
            what = "an empty body" if self.body is None else \
                f"a body that is not JSON ({self.text[:80]!r})"
            raise invalid(f"{where} with {what}; expected {model.__name__}", self)
        try:
            return model.model_validate(self.body)
        except ValidationError as exc:
            fields = sorted({".".join(map(str, e["loc"])) or "(root)" for e in exc.errors()})
            raise invalid(f"{where} with a body that is not a {model.__name__} "
                          f"(fields {', '.join(fields)}: {_first_error(exc)})", self) from None


def invalid(message: str, response: Response) -> ResponseInvalid:
    """The error for an unreadable answer to ``response``'s request: an
    :class:`~underway.errors.OutcomeUnknown` as well when the request was mutating."""
    cls = ResponseInvalid if response.method in SAFE_METHODS else MutationAnswerInvalid
    return cls(message, method=response.method, url=response.url)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or '(root)'}: {err['msg']}"


def install_interceptor(interceptor: Interceptor | None) -> Interceptor | None:
    """Put ``interceptor`` between every :func:`request` and the network in this process
    (None removes it); returns the one it replaces."""
    global _interceptor
    previous, _interceptor = _interceptor, interceptor
    return previous


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
    """Send one request carrying the call's idempotency key and fence.

    See the module docstring for what each outcome raises. Secret values never appear in an
    error.

    Args:
        method: The HTTP method.
        url: The URL.
        info: The call's :class:`CallInfo`; it gives the key and the fence.
        json_body: The body, sent as JSON.
        headers: More headers.
        timeout: Seconds to wait for the answer.
        client: A client of your own to reuse (its connection pool, transport, TLS
            settings).
    """
    verb = method.upper()
    if info.egress is not None:
        info.egress.check(url)
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
        resp = await _send(http, http.build_request(
            verb, url, content=data, headers=all_headers, timeout=timeout), info)
    except Exception as exc:
        # Read by its nature (:mod:`underway.lost_track`): sent, and the answer lost?
        if verb in SAFE_METHODS or getattr(exc, "outcome_unknown", False) \
                or not lost_track(exc):
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
                    is_json, verb, url)


async def _send(http: httpx.AsyncClient, req: httpx.Request, info: CallInfo) -> httpx.Response:
    """Send ``req`` through the interceptor, if any, following redirects as the client
    would, each hop checked against the call's egress allow-list before it is sent."""
    for _ in range(MAX_REDIRECTS + 1):
        if _interceptor is not None:
            resp = await _interceptor(req, info, _network(http))
        else:
            resp = await _network(http)(req)
        nxt = resp.next_request if http.follow_redirects else None
        if nxt is None:
            return resp
        await resp.aclose()
        if info.egress is not None:
            info.egress.check(str(nxt.url))
        req = nxt
    raise httpx.TooManyRedirects(f"more than {MAX_REDIRECTS} redirects", request=req)


def _network(http: httpx.AsyncClient) -> Send:
    async def send(req: httpx.Request) -> httpx.Response:
        resp = await http.send(req, follow_redirects=False)
        await resp.aread()
        return resp
    return send


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
