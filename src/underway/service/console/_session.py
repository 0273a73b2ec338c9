"""Console sign-in: an API key exchanged for a session cookie, and CSRF tokens.

The cookie (``uw_session``, HttpOnly, SameSite=Strict, Secure over https) holds the key's
id, an expiry and a random nonce, MACed with the app's session secret together with the
key's stored token hash. Nothing about a session is stored server-side: every request
looks the key up again, so revoking a key (``underway apikeys revoke``) ends its sessions
at once. A session's CSRF token is a MAC of its nonce; every form and every script POST
carries it (field ``csrf`` or header ``X-CSRF-Token``), and every console POST checks it
along with the ``Origin`` header when the browser sends one. Sign-in itself is protected
by a double-submit token (cookie ``uw_login`` and the form's field)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from dataclasses import dataclass

from fastapi import Request, Response

from ...apikeys import PERMISSIONS, ROLES, Role, authenticate
from ...inputs import InvalidInput, parse_json
from ...store._offload import run_io
from ...store.base import ApiKeyRecord, Store
from .._auth import Principal

SESSION_COOKIE = "uw_session"
"""The session cookie's name."""
LOGIN_COOKIE = "uw_login"
"""The sign-in form's double-submit cookie."""
CSRF_HEADER = "x-csrf-token"
"""The header a script's POST carries its CSRF token in."""
SESSION_TTL = 8 * 3600.0
"""How long a session lasts, in seconds, before signing in again."""
_KEY_ID = re.compile("[0-9a-f]{16}")


class SignInRequired(Exception):
    """The request has no valid session: the console answers with the sign-in page."""


class Forbidden(Exception):
    """The request is refused (a bad CSRF token, a foreign origin, a role short of what the
    page needs); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in browser: the key's principal, the session's CSRF token and expiry."""

    principal: Principal
    csrf: str
    expires_at: float

    def may(self, permission: str) -> bool:
        """Whether the key's role holds ``permission``."""
        return permission in PERMISSIONS[self.principal.role]


class Sessions:
    """Issues and checks session cookies with one secret (random per process unless
    given: then sessions survive a restart and are shared by every server given it)."""

    def __init__(self, store: Store, secret: bytes | None = None,
                 ttl: float = SESSION_TTL) -> None:
        self.store = store
        self._secret = secret or secrets.token_bytes(32)
        self.ttl = ttl

    # -- signing in and out ------------------------------------------------------------
    def login_token(self, request: Request) -> str:
        """The sign-in form's double-submit token (the cookie's, or a new one)."""
        return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)

    def set_login_cookie(self, response: Response, request: Request, token: str) -> None:
        """Set the sign-in form's cookie."""
        response.set_cookie(LOGIN_COOKIE, token, max_age=3600, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https",
                            path="/")

    def check_login_form(self, request: Request, form_token: str) -> None:
        """Refuse a sign-in whose form token does not match its cookie."""
        cookie = request.cookies.get(LOGIN_COOKIE, "")
        if not cookie or not _same(cookie, form_token):
            raise Forbidden("the sign-in form expired or came from elsewhere; reload it")
        check_origin(request)

    async def sign_in(self, token: str) -> ApiKeyRecord | None:
        """The key a pasted token belongs to, if it may use the console."""
        record = await run_io(self.store, authenticate, self.store, token.strip())
        if record is None or "read" not in PERMISSIONS[_role(record)]:
            return None
        return record

    def cookie_value(self, record: ApiKeyRecord, now: float | None = None) -> str:
        """A new session's cookie for ``record``."""
        body = {"k": record.key_id, "e": int((now or time.time()) + self.ttl),
                "n": secrets.token_urlsafe(16)}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload, record.token_hash)}"

    def set_session_cookie(self, response: Response, request: Request, value: str) -> None:
        """Set the session cookie (and drop the sign-in form's)."""
        response.set_cookie(SESSION_COOKIE, value, max_age=int(self.ttl), httponly=True,
                            samesite="strict", secure=request.url.scheme == "https",
                            path="/")
        response.delete_cookie(LOGIN_COOKIE, path="/")

    @staticmethod
    def clear(response: Response) -> None:
        """Sign out: drop the session cookie."""
        response.delete_cookie(SESSION_COOKIE, path="/")

    # -- each request --------------------------------------------------------------------
    async def session(self, request: Request) -> Session:
        """The request's session; :class:`SignInRequired` when it has none that holds."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw or raw.count(".") != 1:
            raise SignInRequired()
        payload, mac = raw.split(".")
        try:
            # A cookie is outside input until its MAC is checked: parsed as strictly as a
            # body (a deep or NaN-laden one is no session), its key id a key id.
            body = parse_json("cookie", _unb64(payload))
            key_id, expires, nonce = str(body["k"]), float(body["e"]), str(body["n"])
        except (ValueError, KeyError, TypeError, InvalidInput):
            raise SignInRequired() from None
        if not _KEY_ID.fullmatch(key_id) or not math.isfinite(expires) \
                or expires <= time.time():
            raise SignInRequired()
        record = await run_io(self.store, self.store.get_api_key, key_id)
        if (record is None or record.revoked_at is not None or record.role not in ROLES
                or not _same(mac, self._mac(payload, record.token_hash))):
            raise SignInRequired()
        principal = Principal(record.key_id, record.name, record.tenant_id, _role(record))
        return Session(principal, self._mac("csrf:" + nonce, record.token_hash), expires)

    def check_csrf(self, request: Request, session: Session, form_token: str | None) -> None:
        """Refuse a POST without the session's CSRF token or from a foreign origin."""
        given = form_token or request.headers.get(CSRF_HEADER, "")
        if not given or not _same(given, session.csrf):
            raise Forbidden("the form's security token is missing or stale; reload the page")
        check_origin(request)

    def _mac(self, payload: str, token_hash: str) -> str:
        digest = hmac.new(self._secret, f"{payload}|{token_hash}".encode(), hashlib.sha256)
        return _b64(digest.digest())


def check_origin(request: Request) -> None:
    """Refuse a request whose ``Origin`` header names another site than its own."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    own = f"{request.url.scheme}://{request.url.netloc}"
    if origin != own:
        raise Forbidden(f"a request from {origin} may not act here")


def _same(given: str, expected: str) -> bool:
    """``given == expected`` in constant time, for any text a browser sends (a cookie or
    form field may hold what no token has: non-ASCII, lone surrogates)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


def _role(record: ApiKeyRecord) -> Role:
    role: Role = record.role  # type: ignore[assignment]
    return role


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
