"""The two busiest requests, served without FastAPI's per-request machinery: ``GET
/v1/runs/{run_id}`` and ``POST /v1/runs/{run_id}/signals``, in their plain shape.

FastAPI resolves an endpoint's dependencies, matches it through every router and checks
its parameters on each request: for these two that cost three times what the work does.
:class:`FastRoutes` (ASGI middleware inside :class:`~underway.service._inputs.BodyLimit`
and the security headers) answers a request of the plain shape itself, with the very
functions the endpoints call, in one trip to the store's thread: the key checked as
:func:`~underway.service._auth.endpoint`'s permission checks it (the same query, so a
revoked key is refused at once), then the endpoint's work, its access-log entry durable
before the answer, the answer JSON bytes.

The plain shape: no query string; a run id of letters, digits and ``._:@-`` (what no input
check refuses); an ``Authorization: Bearer`` token of a key's form; for a signal, an
``application/json`` body that the input checks and the :class:`SendSignal` model take.
Anything else — including every request these checks would refuse — goes to the app as
it came (the body replayed), so every refusal is FastAPI's, word for word. A problem
raised on the way (unknown key, wrong role, no such run, a bad signal name) is answered
by the app's own handler of it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..apikeys import _TOKEN, Permission
from ..inputs import InvalidInput, parse_json
from ..store._offload import run_io
from ..store._reading import committed_reads
from ._auth import ServiceState, admit, identify
from ._inputs import MAX_PARAM, replay
from ._models import SendSignal
from ._reading import Reading
from ._runs import GET_RUN, SEND_SIGNAL, run_detail, signal_answer, signal_run

_T = TypeVar("_T")
_RUN = re.compile(r"/v1/runs/([A-Za-z0-9._:@\-]+)(/signals)?")
_JSON = (b"application/json", b"application/json; charset=utf-8")
_READS = ("GET", "HEAD")


class FastRoutes:
    """ASGI middleware: the plain ``GET /v1/runs/{run_id}`` and ``POST
    /v1/runs/{run_id}/signals`` answered here (see the module), every other request passed
    to ``app``. A ``GET`` (or ``HEAD``) reads within
    :func:`~underway.store._reading.committed_reads`: on SQLite, on read-only connections
    that never wait for a commit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a plain request here, any other through the app."""
        if scope["type"] == "http" and scope["method"] in _READS:
            with committed_reads():
                await self._serve(scope, receive, send)
        else:
            await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _plain(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        run_id, token, signal = found
        state: ServiceState = scope["app"].state.underway
        if not signal:
            await self._answer(scope, receive, send, _read_run(state, token, run_id))
            return
        messages, body = await _body(receive)
        try:
            value = parse_json("body", body)
            signal_body = SendSignal.model_validate(value)
        except (InvalidInput, ValidationError):
            # Refused by the app as it refuses it, from the same bytes.
            await self.app(scope, replay(messages, receive), send)
            return
        await self._answer(scope, replay(messages, receive), send,
                           _send_signal(state, token, run_id, signal_body))

    async def _answer(self, scope: Scope, receive: Receive, send: Send,
                      answer: Coroutine[Any, Any, tuple[bytes, int]]) -> None:
        try:
            body, status = await answer
        except Exception as exc:
            handler = _handler(scope["app"].exception_handlers, exc)
            if handler is None:
                raise  # as from an endpoint: the server's error answer, and its log
            request = Request(scope, receive)
            if inspect.iscoroutinefunction(handler):
                response = await handler(request, exc)
            else:
                response = await run_in_threadpool(handler, request, exc)
            await response(scope, receive, send)
            return
        await Response(body, status_code=status, media_type="application/json")(
            scope, receive, send)


async def _read_run(state: ServiceState, token: str, run_id: str) -> tuple[bytes, int]:
    """What :func:`~underway.service._runs.get_run` answers, and its status."""
    body, logged = await run_io(state.store, _admitted, state, token, GET_RUN.permission,
                                run_detail, run_id, Reading(), GET_RUN.name)
    await state.writes.log_access(logged)  # durable before the answer leaves
    return body, 200


async def _send_signal(state: ServiceState, token: str, run_id: str,
                       body: SendSignal) -> tuple[bytes, int]:
    """What :func:`~underway.service._runs.send_signal` answers, and its status."""
    record, status = await run_io(state.store, _admitted, state, token,
                                  SEND_SIGNAL.permission, signal_run, run_id, body)
    delivered = await state.writes.send_signal(record)
    return signal_answer(run_id, status, delivered), 202


def _admitted(state: ServiceState, token: str, permission: Permission,
              work: Callable[..., _T], *args: Any) -> _T:
    """``work(state, principal, *args)`` for the key behind ``token``, checked first as the
    endpoint's permission checks it (a 401 or 403 problem)."""
    who = admit(identify(state.store, token), permission)
    return work(state, who, *args)


def _plain(scope: Scope) -> tuple[str, str, bool] | None:
    """``(run_id, token, is_signal)`` of a request of the plain shape, else None."""
    if scope["type"] != "http" or scope.get("query_string"):
        return None
    found = _RUN.fullmatch(scope["path"])
    if found is None or len(found[1]) > MAX_PARAM:
        return None
    signal = found[2] is not None
    if scope["method"] != ("POST" if signal else "GET"):
        return None
    token = None
    media = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            if token is not None:
                return None
            token = value
        elif name == b"content-type":
            media = value
    if token is None or token[:7].lower() != b"bearer ":
        return None
    text = token[7:].decode("latin-1")
    if not _TOKEN.fullmatch(text):
        return None
    if signal and (media is None or media.lower() not in _JSON):
        return None
    return found[1], text, signal


async def _body(receive: Receive) -> tuple[list[Message], bytes]:
    """The request's body messages (to hand on) and its bytes."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return messages, b"".join(chunks)


def _handler(handlers: dict[Any, Callable[..., Any]], exc: Exception
             ) -> Callable[..., Any] | None:
    """The app's handler of ``exc``'s class (or the nearest base), short of ``Exception``,
    which the server's error middleware answers, as for an endpoint."""
    for kind in type(exc).__mro__:
        if kind is Exception:
            return None
        if kind in handlers:
            return handlers[kind]
    return None

