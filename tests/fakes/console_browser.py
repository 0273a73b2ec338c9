"""The service world (tests/fakes/service_world.py), plus a signed-in browser session over
httpx (cookies kept, the CSRF token read from the page's ``<meta>``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from fakes.service_world import TENANTS, World

__all__ = ["TENANTS", "World", "csrf_of", "login_form_token", "sign_in"]


def login_form_token(page: str) -> str:
    """The sign-in form's double-submit token."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def csrf_of(page: str) -> str:
    """A signed-in page's CSRF token (its ``<meta name="csrf-token">``)."""
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert found, page
    return found.group(1)


@contextmanager
def sign_in(world: World, tenant: str = "acme", role: str = "viewer") -> Iterator[httpx.Client]:
    """A browser-like client signed in with the tenant's key of ``role`` (closed after)."""
    with httpx.Client(base_url=world.server.url, timeout=30.0) as browser:
        form = browser.get("/login")
        r = browser.post("/login", data={"token": world.token[tenant][role], "next": "/runs",
                                         "csrf": login_form_token(form.text)})
        assert r.status_code == 303, r.text
        yield browser
