"""Console sign-in: an API key becomes a session cookie (HttpOnly, SameSite=Strict); every
POST needs the session's CSRF token and its own origin; a revoked key, a tampered or
expired cookie sign the browser out; the security headers are on every page."""

from __future__ import annotations

import httpx
import pytest

from fakes.console_browser import csrf_of, login_form_token, sign_in
from fakes.service_world import World
from underway.service.console import CONSOLE_CSP


def test_a_page_without_a_session_leads_to_the_sign_in_form(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        r = browser.get("/runs?status=dead", headers={"Accept": "text/html"})
        assert r.status_code == 303
        assert r.headers["location"] == "/login?next=%2Fruns%3Fstatus%3Ddead"
        form = browser.get(r.headers["location"])
        assert form.status_code == 200 and 'name="token"' in form.text
        assert 'name="next" value="/runs?status=dead"' in form.text


def test_signing_in_sets_a_strict_httponly_cookie_and_lands_on_next(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        token = login_form_token(browser.get("/login").text)
        r = browser.post("/login", data={"token": world.token["acme"]["viewer"],
                                         "csrf": token, "next": "/approvals"})
        assert r.status_code == 303 and r.headers["location"] == "/approvals"
        cookie = next(h for h in r.headers.get_list("set-cookie")
                      if h.startswith("uw_session="))
        attrs = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "samesite", "path", "max-age"} <= attrs
        assert "samesite=strict" in cookie.lower()
        page = browser.get("/")
        assert page.status_code == 303 and page.headers["location"] == "/runs"


@pytest.mark.parametrize("role", ["viewer", "operator", "approver", "admin"])
def test_every_reading_role_may_sign_in(world: World, role: str) -> None:
    with sign_in(world, role=role) as browser:
        r = browser.get("/runs")
        assert r.status_code == 200 and f"· {role} · tenant" in r.text


@pytest.mark.parametrize("token", ["", "uwk_nope", "uwk_0123456789abcdef_wrong", "x" * 400])
def test_a_bad_key_is_refused_without_a_session(world: World, token: str) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        csrf = login_form_token(browser.get("/login").text)
        r = browser.post("/login", data={"token": token, "csrf": csrf})
        assert r.status_code == 401 and "unknown, revoked" in r.text
        assert "uw_session" not in browser.cookies


def test_an_intake_key_cannot_use_the_console(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        csrf = login_form_token(browser.get("/login").text)
        r = browser.post("/login", data={"token": world.token["acme"]["intake"], "csrf": csrf})
        assert r.status_code == 401 and "uw_session" not in browser.cookies


def test_signing_in_needs_the_forms_own_token(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        browser.get("/login")
        r = browser.post("/login", data={"token": world.token["acme"]["admin"],
                                         "csrf": "forged"})
        assert r.status_code == 403 and "uw_session" not in browser.cookies
    with httpx.Client(base_url=world.server.url) as fresh:  # no form cookie at all
        r = fresh.post("/login", data={"token": world.token["acme"]["admin"], "csrf": "x"})
        assert r.status_code == 403


def test_sign_in_from_another_origin_is_refused(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        csrf = login_form_token(browser.get("/login").text)
        r = browser.post("/login", data={"token": world.token["acme"]["admin"], "csrf": csrf},
                         headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "uw_session" not in browser.cookies


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "runs",
                                    "javascript:alert(1)"])
def test_next_never_leaves_the_site(world: World, target: str) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        csrf = login_form_token(browser.get("/login").text)
        r = browser.post("/login", data={"token": world.token["acme"]["viewer"],
                                         "csrf": csrf, "next": target})
        assert r.status_code == 303 and r.headers["location"] == "/runs"


def test_sign_out_needs_the_csrf_token(world: World) -> None:
    with sign_in(world) as browser:
        csrf = csrf_of(browser.get("/runs").text)
        assert browser.post("/logout", data={"csrf": "forged"}).status_code == 403
        assert browser.post("/logout", data={}).status_code == 403
        assert browser.post("/logout", data={"csrf": csrf},
                            headers={"Origin": "https://evil.example"}).status_code == 403
        assert browser.get("/runs").status_code == 200  # still signed in
        r = browser.post("/logout", data={"csrf": csrf})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert "uw_session" not in browser.cookies


def test_a_revoked_key_ends_its_sessions(world: World) -> None:
    with sign_in(world, role="operator") as browser:
        assert browser.get("/runs").status_code == 200
        key_id = world.token["acme"]["operator"].split("_")[1]
        r = world.call("DELETE", f"/v1/api-keys/{key_id}")
        assert r.status_code == 204
        r = browser.get("/runs", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"].startswith("/login")


def test_a_tampered_or_foreign_cookie_is_no_session(world: World) -> None:
    with sign_in(world) as browser:
        value = browser.cookies["uw_session"]
    payload, mac = value.split(".")
    for forged in (f"{payload}.{mac[:-2]}AA", f"{payload}x.{mac}", "garbage", "a.b.c", ""):
        with httpx.Client(base_url=world.server.url, cookies={"uw_session": forged}) as other:
            r = other.get("/runs", headers={"Accept": "text/html"})
            assert r.status_code == 303, forged
    with httpx.Client(base_url=world.server.url, cookies={"uw_session": value}) as same:
        assert same.get("/runs").status_code == 200  # the genuine cookie holds
    # A cookie of one server is no session on another (each has its own secret).
    with World(world.store_url) as second:
        other = httpx.Client(base_url=second.server.url, cookies={"uw_session": value})
        with other:
            assert other.get("/runs", headers={"Accept": "text/html"}).status_code == 303


def test_servers_given_one_secret_share_sessions(db_url: str) -> None:
    secret = b"k" * 32
    with World(db_url, session_secret=secret) as first:
        with sign_in(first) as browser:
            value = browser.cookies["uw_session"]
        with World(db_url, session_secret=secret) as second:
            other = httpx.Client(base_url=second.server.url, cookies={"uw_session": value})
            with other:
                assert other.get("/runs").status_code == 200


def test_a_script_post_without_a_session_is_401_not_a_redirect(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        r = browser.post("/logout", data={"csrf": "x"}, headers={"Accept": "*/*"})
        assert r.status_code == 401


def test_console_pages_carry_the_security_headers(world: World) -> None:
    with httpx.Client(base_url=world.server.url) as browser:
        for path in ("/login", "/static/console.css"):
            r = browser.get(path)
            assert r.status_code == 200
            assert r.headers["content-security-policy"] == CONSOLE_CSP
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["x-content-type-options"] == "nosniff"
        assert "'unsafe-inline'" not in CONSOLE_CSP and "frame-ancestors 'none'" in CONSOLE_CSP
        api = world.call("GET", "/v1/runs")
        assert api.headers["x-frame-options"] == "DENY"
        assert "content-security-policy" not in api.headers


def test_no_page_has_inline_script_or_style(world: World) -> None:
    run_id = world.start()
    with sign_in(world, role="admin") as browser:
        for path in ("/login", "/runs", "/runs?status=dead&q=x", f"/runs/{run_id}",
                     f"/runs/{run_id}?at=2&page=1", f"/runs/{run_id}?done=cancel"):
            html = browser.get(path).text
            assert "<script>" not in html and " style=" not in html and "<style" not in html
            assert " on" + "click=" not in html
