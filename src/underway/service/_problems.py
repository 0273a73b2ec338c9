"""Errors as RFC 9457 problem details (``application/problem+json``), each with a stable
``type``; bad input names the field. Every handler here answers before anything is stored,
or after a store call that refused and changed nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    ConfigurationError,
    FieldProblem,
    InvalidInput,
    KeyUnavailable,
    ResidencyError,
    RunNotFound,
    SignedResolutionRequired,
)

log = logging.getLogger("underway.service")

PROBLEM_TYPE = "urn:underway:problem:"
"""Every problem's ``type`` is this followed by a slug (``not-found``, ``invalid-input``...)."""

MEDIA_TYPE = "application/problem+json"


class FieldError(BaseModel):
    """One bad part of a request: where (``field``: ``query.limit``, ``body.input.sku``,
    ``header.idempotency-key``; ``loc``: the same as a list of keys and indexes), what is
    wrong with it (``message``, ``msg``) and the kind of error (``type``: ``missing``,
    ``int_parsing``...)."""

    field: str
    message: str
    loc: list[str | int] = Field(default_factory=list)
    msg: str = ""
    type: str = "invalid"

    @classmethod
    def of(cls, loc: Sequence[str | int], msg: str, type: str = "invalid") -> FieldError:
        """The error at ``loc``.

        Args:
            loc: Where, as keys and indexes (``("body", "input", "sku")``).
            msg: What is wrong.
            type: The kind of error.
        """
        return cls(field=_field(loc), message=msg, loc=list(loc), msg=msg, type=type)


def field_errors(problems: Iterable[FieldProblem], *, within: Sequence[str] = ()
                 ) -> list[FieldError]:
    """The problem's ``errors`` for ``problems`` (an :class:`InvalidInput`'s, an
    intake refusal's), each ``loc`` put ``within`` a part of the request.

    Args:
        problems: The bad fields.
        within: Where the checked value sits in the request (``("body",)``).
    """
    return [FieldError.of((*within, *p.loc), p.msg, p.type) for p in problems]


class Problem(BaseModel):
    """An RFC 9457 problem: ``type`` is stable (match on it), ``detail`` is for people."""

    type: str = Field(examples=["urn:underway:problem:not-found"])
    title: str
    status: int
    detail: str
    errors: list[FieldError] = Field(default_factory=list)


class ApiProblem(Exception):
    """Raised by a handler to answer with a problem."""

    def __init__(
        self, status: int, slug: str, title: str, detail: str,
        errors: Iterable[FieldError] = (), headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = Problem(type=PROBLEM_TYPE + slug, title=title, status=status,
                               detail=detail, errors=list(errors))
        self.headers = headers

    @classmethod
    def answering(cls, problem: Problem) -> ApiProblem:
        """The exception that answers with ``problem`` as it is.

        Args:
            problem: The problem.
        """
        raised = cls(problem.status, "", problem.title, problem.detail)
        raised.problem = problem
        return raised


def invalid(field: str, message: str, *, status: int = 422) -> ApiProblem:
    """A problem naming one bad field."""
    return ApiProblem(status, "invalid-input", "Invalid input", f"{field}: {message}",
                      [FieldError.of(field.split("."), message)])


def invalid_input(exc: InvalidInput, *, within: Sequence[str] = ()) -> Problem:
    """The problem answering ``exc``: its status, ``invalid-input`` (``invalid-json`` for
    a body that is not JSON at all), the fields named in ``detail`` and listed in
    ``errors``.

    Args:
        exc: The refusal.
        within: Where the checked value sits in the request (``("body",)`` for a run's
            input checked against its flow's model).
    """
    slug, title = (("invalid-json", "Invalid JSON") if exc.status == 400
                   and exc.field == "body" else ("invalid-input", "Invalid input"))
    return Problem(type=PROBLEM_TYPE + slug, title=title, status=exc.status,
                   detail=str(exc), errors=field_errors(exc.errors, within=within))


def not_found(what: str) -> ApiProblem:
    """Nothing of that name in the caller's tenant (whether it exists elsewhere is not
    said)."""
    return ApiProblem(404, "not-found", "Not found", f"no {what} in this tenant")


def conflict(detail: str) -> ApiProblem:
    """The request is valid but the resource is not in a state to take it."""
    return ApiProblem(409, "conflict", "Conflict", detail)


def respond(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    """The HTTP response carrying ``problem``."""
    return JSONResponse(problem.model_dump(mode="json"), status_code=problem.status,
                        media_type=MEDIA_TYPE, headers=headers)


def _field(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc) or "body"


def _validation(exc: RequestValidationError) -> Problem:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = "; ".join(str(e.get("ctx", {}).get("error", e.get("msg"))) for e in errors)
        return Problem(type=PROBLEM_TYPE + "invalid-json", title="Invalid JSON", status=400,
                       detail=f"the body is not valid JSON: {detail}",
                       errors=[FieldError.of(["body"], detail, "json_invalid")])
    fields = [FieldError.of(tuple(e.get("loc", ())), str(e.get("msg", "")),
                            str(e.get("type", "invalid"))) for e in errors]
    return Problem(type=PROBLEM_TYPE + "invalid-input", title="Invalid input", status=422,
                   detail="; ".join(f"{f.field}: {f.message}" for f in fields), errors=fields)


_HTTP = {
    401: ("unauthorized", "Unauthorized"), 403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"), 405: ("method-not-allowed", "Method not allowed"),
}


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as a problem."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)
        return respond(exc.problem, exc.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return respond(_validation(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        slug, title = _HTTP.get(exc.status_code, ("http-error", "HTTP error"))
        detail = exc.detail if isinstance(exc.detail, str) else title
        return respond(Problem(type=PROBLEM_TYPE + slug, title=title, status=exc.status_code,
                               detail=detail), dict(exc.headers or {}))

    async def on_invalid_input(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidInput)
        return respond(invalid_input(exc))

    async def on_run_not_found(request: Request, exc: Exception) -> JSONResponse:
        return respond(not_found("such run").problem)

    async def on_configuration(request: Request, exc: Exception) -> JSONResponse:
        return respond(Problem(type=PROBLEM_TYPE + "invalid-input", title="Invalid input",
                               status=422, detail=str(exc)))

    async def on_signed_only(request: Request, exc: Exception) -> JSONResponse:
        # The client refused an unsigned resolution: the workers would ignore it.
        return respond(Problem(type=PROBLEM_TYPE + "signed-resolution-required",
                               title="Signed resolution required", status=409,
                               detail=str(exc)))

    async def on_key_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # Reads show sealed payloads as "[encrypted]"; only a write gets here.
        return respond(Problem(type=PROBLEM_TYPE + "keys-unavailable",
                               title="Encrypted, and no key here", status=503,
                               detail=str(exc)))
    async def on_no_region(request: Request, exc: Exception) -> JSONResponse:
        # The key's tenant has no region: nothing of it can be read or written anywhere.
        return respond(Problem(type=PROBLEM_TYPE + "no-region", title="No region",
                               status=422, detail=str(exc)))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return respond(Problem(type=PROBLEM_TYPE + "internal", title="Internal error",
                               status=500, detail="the server failed; see its log"))

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(InvalidInput, on_invalid_input)
    app.add_exception_handler(RunNotFound, on_run_not_found)
    app.add_exception_handler(ConfigurationError, on_configuration)
    app.add_exception_handler(SignedResolutionRequired, on_signed_only)
    app.add_exception_handler(KeyUnavailable, on_key_unavailable)
    app.add_exception_handler(ResidencyError, on_no_region)
    app.add_exception_handler(Exception, on_unexpected)


def problem_responses(*statuses: int, register: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for ``statuses``, each a :class:`Problem`, in both
    media types. The entries refer to the schema by name; one route of the app passes
    ``register`` to put it in the document's components. (Naming the model on every
    route would have FastAPI build a validator of it per route and status, at start-up,
    for a document that would not change.)"""
    ref = {"schema": {"$ref": "#/components/schemas/Problem"}}
    return {
        status: {**({"model": Problem} if register else {}),
                 "content": {MEDIA_TYPE: ref, "application/json": ref},
                 "description": _describe(status)}
        for status in statuses
    }


def _describe(status: int) -> str:
    return {
        400: "The body is not valid JSON", 401: "No valid API key, or a bad signature",
        403: "The key's role may not do this", 404: "Not found in the key's tenant",
        409: "Not in a state to take this", 413: "The body is larger than the server takes",
        422: "Invalid input (the field is named)",
        503: "Not ready",
    }.get(status, "Problem")
