"""Bad input stops at the door: one check of every request before FastAPI parses it, and
a limit on the size of its body.

:class:`CheckedRoute` is the route class of every router of the app (the API's and the
console's). Before a request reaches its endpoint it checks, with :mod:`underway.inputs`:

- every path and query parameter: no NUL, no lone surrogate, at most
  :data:`MAX_PARAM` characters; a numeric query parameter finite and within 64 bits;
- the ``Authorization`` header: printable ASCII, as every API key is;
- a JSON body (or one without a content type): decoded strictly (no ``NaN`` or
  ``Infinity``, no number overflowing a float, at most
  :data:`~underway.inputs.MAX_DEPTH` deep, no NUL or lone surrogate in any string);
- a form's fields: text as above, and no files.

A refusal is an :class:`~underway.errors.InvalidInput`, answered as a problem naming the
field (``path.run_id``, ``query.q``, ``body.input.items.0``, ``form.reason``). Nothing
has been read from the store or written to it then.

:class:`BodyLimit` answers 413 to a body over its limit (``[serve] max_body_bytes``,
``underway serve --max-body-bytes``; default :data:`MAX_BODY_BYTES`) before any of it is
parsed: at once for a ``Content-Length`` over it, and as soon as a chunked body's bytes
pass it."""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine
from typing import Any, Union, get_args, get_origin

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.datastructures import UploadFile
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..inputs import MAX_NAME, InvalidInput, integer, number, parse_json, text
from ._problems import PROBLEM_TYPE, FieldError, Problem, respond

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body the server reads by default: 1 MiB."""
MAX_PARAM = MAX_NAME
"""The longest path or query parameter, in characters."""

_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class CheckedRoute(APIRoute):
    """A route whose request is checked (see the module) before its endpoint is called."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The endpoint's handler, behind :func:`check_request`."""
        handler = super().get_route_handler()
        numeric = _numbers(self.dependant)

        async def checked(request: Request) -> Response:
            await check_request(request, numeric)
            return await handler(request)

        return checked


def _numbers(root: Dependant) -> dict[str, type]:
    """The query parameters of ``root`` (and its dependencies) that are numbers, by name:
    float or int."""
    found: dict[str, type] = {}
    todo = [root]
    while todo:
        dependant = todo.pop()
        todo.extend(dependant.dependencies)
        for param in dependant.query_params:
            kind = _numeric(param.field_info.annotation)
            if kind is not None:
                found[param.alias] = kind
    return found


def _numeric(annotation: Any) -> type | None:
    """``float`` or ``int`` when the annotation is one (or one or None)."""
    if get_origin(annotation) in (Union, types.UnionType):
        kinds = {a for a in get_args(annotation) if a is not type(None)}
        annotation = kinds.pop() if len(kinds) == 1 else None
    if annotation is bool:
        return None
    return annotation if annotation in (float, int) else None


async def check_request(request: Request, numeric: dict[str, type]) -> None:
    """Refuse (:class:`InvalidInput`) a request with a parameter, header or body a run
    cannot hold; ``numeric``: the query parameters that are numbers (float or int)."""
    auth = request.headers.get("authorization")
    if auth is not None and not (auth.isascii() and auth.isprintable()):
        raise InvalidInput("header.authorization", "holds characters no API key has "
                           "(only printable ASCII)", status=400)
    for name, value in request.path_params.items():
        if isinstance(value, str):
            text(f"path.{name}", value, max_length=MAX_PARAM)
    for name, value in request.query_params.multi_items():
        field = f"query.{name}"
        text(field, value, max_length=MAX_PARAM)
        kind = numeric.get(name)
        if kind is float:
            _checked(field, value, float, number)
        elif kind is int:
            _checked(field, value, int, integer)
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    body = await request.body()
    if not body:
        return
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media in _FORMS:
        form = await request.form()
        for name, item in form.multi_items():
            if isinstance(item, UploadFile):
                raise InvalidInput(f"form.{name}", "files are not accepted", status=415)
            text(f"form.{name}", item)
    elif not media or (media.startswith("application/") and (
            media.endswith("/json") or media.endswith("+json"))):
        parse_json("body", body)


def _checked(field: str, value: str, parse: Callable[[str], Any],
             check: Callable[[str, Any], object]) -> None:
    """``check`` the parsed ``value``; one that does not parse is left to FastAPI."""
    try:
        parsed = parse(value)
    except ValueError:
        return
    check(field, parsed)


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 (a problem
    naming ``body``) before the app sees any of it. The body is read whole here, up to
    the limit, and handed to the app as one message."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope``; an over-long body gets 413 instead."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away: the app learns it on its first read.
                await self.app(scope, replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, replay([whole], receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"larger than {self.max_bytes} bytes (the server's max_body_bytes)"
        problem = Problem(type=PROBLEM_TYPE + "body-too-large", title="Body too large",
                          status=413, detail=f"body: {message}",
                          errors=[FieldError.of(["body"], message, "too_large")])
        response = respond(problem, {"Connection": "close"})
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that first hands out ``messages``, then asks the server."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay

