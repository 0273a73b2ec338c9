"""Security headers on every response: no framing, no MIME sniffing, no referrer to other
sites; and on the console's pages a Content-Security-Policy that allows scripts, styles
and connections only from the server itself — no inline script, no inline style, no
plug-ins, forms posting only here."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
"""The console's Content-Security-Policy."""

_EVERYWHERE = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
# Swagger UI (/docs) loads its script from elsewhere and inlines some: it keeps the
# headers above but not the console's policy. The API answers JSON, where a CSP is moot.
_NO_CSP = ("/docs", "/v1/", "/openapi.json", "/metrics", "/healthz", "/readyz")


class SecurityHeaders:
    """ASGI middleware adding the headers above (a plain ASGI wrapper: it does not buffer
    a response, so the event streams pass through as they are written)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = list(_EVERYWHERE)
        if not str(scope.get("path", "")).startswith(_NO_CSP):
            extra.append((b"content-security-policy", CONSOLE_CSP.encode()))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)
