"""What every console page shares: the templates, the signed-in session as a dependency,
the sign-in and sign-out pages, and how a missing session or a refused request is
answered (the sign-in page; a 403 page naming the reason)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from ...apikeys import Permission
from ...inputs import InvalidInput
from ...ops.charts import Chart, svg
from ...store.access import DEFAULT_PURPOSE, PURPOSE_MAX, PURPOSES, check_purpose
from .._auth import ServiceState, shared
from .._inputs import CheckedRoute
from .._problems import invalid_input, respond
from .._reading import may_reveal
from ._session import Forbidden, Session, Sessions, SignInRequired

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

_templates = Environment(
    loader=PackageLoader("underway.service.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True, lstrip_blocks=True,
)


def _when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


_templates.filters["when"] = _when


def _svg(chart: Chart) -> Markup:
    """A chart drawn as SVG (:func:`underway.ops.charts.svg` escapes every text in it)."""
    return Markup(svg(chart))


_templates.filters["svg"] = _svg


def render(request: Request, template: str, context: Mapping[str, Any] | None = None, *,
           session: Session | None = None, status_code: int = 200) -> HTMLResponse:
    """The page ``template`` rendered with ``context`` (and the session's principal and
    CSRF token, which the layout puts in the navigation and a ``<meta>`` for scripts)."""
    html = _templates.get_template(template).render(
        request=request, session=session, **(context or {}))
    return HTMLResponse(html, status_code=status_code,
                        headers={"Cache-Control": "no-store"})


def fragment(template: str, context: Mapping[str, Any]) -> str:
    """A piece of a page without the layout (what a script inserts into one), rendered
    and escaped like a page."""
    return _templates.get_template(template).render(**context)


def sessions(request: Request) -> Sessions:
    """The app's session issuer."""
    issuer: Sessions = request.app.state.console
    return issuer


def service(request: Request) -> ServiceState:
    """The app's shared state (the client, the store)."""
    state: ServiceState = request.app.state.underway
    return state


async def signed_in(request: Request) -> Session:
    """The request's session (a dependency of every page but sign-in)."""
    session = await sessions(request).session(request)
    request.state.principal = session.principal
    return session


Signed = Annotated[Session, Depends(signed_in)]
"""A page's parameter: the signed-in session."""
Console = Annotated[ServiceState, Depends(shared)]
"""A page's parameter: the app's shared state."""


def require(session: Session, permission: Permission) -> None:
    """Refuse (403) a session whose key's role lacks ``permission``."""
    if not session.may(permission):
        raise Forbidden(f"a {session.principal.role} key may not do this")


@dataclass(frozen=True, slots=True)
class ReadAs:
    """A page's read of run data: its ``purpose`` (written to the access log), whether it
    shows sensitive fields (``reveal``) and whether the session may ask to."""

    purpose: str
    reveal: bool
    may_reveal: bool

    @property
    def query(self) -> str:
        """The query that keeps this read on the page's links (empty by default)."""
        keep = {k: v for k, v in (("purpose", self.purpose), ("reveal", "1"))
                if (k == "purpose" and v != DEFAULT_PURPOSE) or (k == "reveal" and self.reveal)}
        return urlencode(keep)

    @property
    def choices(self) -> list[str]:
        """The purposes the page offers (the current one among them)."""
        return list(PURPOSES) + ([] if self.purpose in PURPOSES else [self.purpose])


Purpose = Annotated[str, Query(max_length=PURPOSE_MAX + 20)]
"""A page's ``purpose`` query parameter (checked by :func:`read_as`)."""
Reveal = Annotated[bool, Query()]
"""A page's ``reveal`` query parameter."""


def read_as(state: ServiceState, session: Session, purpose: str, reveal: bool, *,
            deciding: bool = False) -> ReadAs:
    """The page's read: a 422 page for a bad purpose, a 403 page for a reveal the key's
    role may not ask for (:func:`~underway.service._reading.may_reveal`)."""
    try:
        purpose = check_purpose(purpose)
    except ValueError as exc:
        raise Invalid(f"purpose: {exc}") from None
    may = may_reveal(state, session.principal, deciding=deciding)
    if reveal and not may:
        raise Forbidden(f"a {session.principal.role} key may not show sensitive fields "
                        "here")
    return ReadAs(purpose, reveal, may)


class Invalid(Exception):
    """A page's query is wrong; ``reason`` says how (a 422 page)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def check_form(request: Request, session: Session, csrf: str | None) -> None:
    """Refuse a POST without the session's CSRF token (field or header) or from another
    origin."""
    sessions(request).check_csrf(request, session, csrf)


@router.get("/")
async def home() -> RedirectResponse:
    """The console opens on the runs."""
    return RedirectResponse("/runs", status_code=303)


@router.get("/login")
async def login_page(request: Request, next: str = "/runs") -> HTMLResponse:
    """The sign-in form: paste an API key."""
    return _login(request, next)


@router.post("/login")
async def login(
    request: Request, token: Annotated[str, Form(max_length=500)] = "",
    csrf: Annotated[str, Form(max_length=200)] = "", next: Annotated[str, Form()] = "/runs",
) -> Response:
    """Exchange an API key for a session cookie."""
    issuer = sessions(request)
    issuer.check_login_form(request, csrf)
    record = await issuer.sign_in(token)
    if record is None:
        return _login(request, next, error="That key is unknown, revoked, or may not read "
                      "runs (an intake key cannot use the console).", status_code=401)
    response = RedirectResponse(_local(next), status_code=303)
    issuer.set_session_cookie(response, request, issuer.cookie_value(record))
    return response


@router.post("/logout")
async def logout(request: Request, session: Signed,
                 csrf: Annotated[str, Form(max_length=200)] = "") -> Response:
    """End the session (the cookie is dropped)."""
    check_form(request, session, csrf)
    response = RedirectResponse("/login", status_code=303)
    Sessions.clear(response)
    return response


def _login(request: Request, next: str, *, error: str = "",
           status_code: int = 200) -> HTMLResponse:
    issuer = sessions(request)
    token = issuer.login_token(request)
    response = render(request, "login.html", {"csrf": token, "next": _local(next),
                                              "error": error}, status_code=status_code)
    issuer.set_login_cookie(response, request, token)
    return response


def _local(target: str) -> str:
    """``target`` if it is a path of this site, else the runs page (no open redirect)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/runs"
    return target


def install_handlers(app: FastAPI) -> None:
    """Answer a missing session with the sign-in page (a redirect for a page; 401 for a
    script's request), a refused request with a 403 page, and bad input
    (:class:`~underway.errors.InvalidInput`) with an error page naming the field for a
    browser's page, a problem for anything else."""

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        if request.method == "GET" and "text/html" in request.headers.get("accept", "html"):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        return render(request, "error.html", {"title": "Signed out",
                                              "reason": "sign in again"}, status_code=401)

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> Response:
        return render(request, "error.html", {"title": "Refused", "reason": exc.reason},
                      status_code=403)

    # Replaces the API's handler (underway.service._problems) with one that also knows
    # the console: a browser's page gets an error page, anything else the problem.
    @app.exception_handler(InvalidInput)
    async def _invalid_input(request: Request, exc: InvalidInput) -> Response:
        if request.url.path.startswith("/v1/") or "text/html" not in request.headers.get(
                "accept", ""):
            return respond(invalid_input(exc))
        return render(request, "error.html", {"title": "Invalid", "reason": str(exc)},
                      status_code=exc.status)

    @app.exception_handler(Invalid)
    async def _invalid(request: Request, exc: Invalid) -> Response:
        return render(request, "error.html", {"title": "Invalid", "reason": exc.reason},
                      status_code=422)


def not_found(request: Request, session: Session, what: str) -> HTMLResponse:
    """The 404 page: nothing of that name in the session's tenant (whether it exists in
    another is not said, as in the API)."""
    return render(request, "error.html", {"title": "Not found",
                                          "reason": f"no {what} in this tenant"},
                  session=session, status_code=404)
