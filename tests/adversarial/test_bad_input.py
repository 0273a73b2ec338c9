"""Bad input never makes a 5xx and never stores anything: every refusal of the service (the
API, the signed intake endpoint, the console) is a 4xx ``application/problem+json`` that
names the field, and the database is the same, row for row, after it. Attacked on a real
server over SQLite and a real PostgreSQL: NUL characters (PostgreSQL cannot store them),
NaN, infinities and lone surrogates (no JSON or UTF-8 form), documents nested too deep
for a parser's stack, non-ASCII credentials, cursors past 64 bits, bodies over the limit."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

import httpx
import psycopg
import pytest
from fastapi.routing import APIRoute

import underway as uw
from fakes.console_browser import csrf_of, login_form_token, sign_in
from fakes.route_table import SAMPLES, acme
from fakes.service_world import World
from underway import webhooks
from underway.apikeys import issue_key
from underway.inputs import MAX_INT, InvalidInput
from underway.service import ServerThread, create_app
from underway.service._inputs import CheckedRoute
from underway.store import connect
from underway.store.base import IntakeSecretRecord

PROBLEM = "application/problem+json"
LITERALS = {"events", "stream", "deltas", "signals", "cancel", "resume", "resolve",
            "decision", "verify", "bulk", "settle", "answer", "approve", "reject", "fork", "days",
            "runs"}
SECRET = "s" * 32
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    w = World(db_url)
    w.store.put_intake_secret(IntakeSecretRecord("acme", "billing", SECRET, w.clock.now()))
    yield w
    w.close()


# -- what "nothing stored" means: every table, row for row ---------------------------------
def stored(world: World) -> dict[str, str]:
    """A digest of every table's rows, by table."""
    url = world.store_url
    if url.startswith("sqlite"):
        with sqlite3.connect(urlparse(url).path) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: hashlib.sha256(repr(sorted(map(repr, conn.execute(
                f'SELECT * FROM "{t}"')))).encode()).hexdigest() for t in tables}
    schema = parse_qs(urlparse(url).query)["schema"][0]
    base = url.split("?")[0]
    with psycopg.connect(base, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,))]
        return {t: str(conn.execute(
            f'SELECT md5(coalesce(string_agg(r::text, \'|\' ORDER BY r::text), \'\')) '
            f'FROM "{schema}"."{t}" r').fetchone()) for t in tables}


def refused(response: httpx.Response, field: str) -> dict[str, Any]:
    """``response`` is a 4xx problem naming ``field`` (its start: ``path.``)."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    problem: dict[str, Any] = response.json()
    named = [e["field"] for e in problem["errors"]]
    assert any(f.startswith(field) for f in named) and field in problem["detail"], problem
    return problem


def unchanged(world: World, field: str, send: Callable[..., httpx.Response], *args: Any,
              **kwargs: Any) -> None:
    """``send(*args, **kwargs)`` is refused naming ``field``, and the database is as it
    was."""
    before = stored(world)
    refused(send(*args, **kwargs), field)
    assert stored(world) == before


def raw(world: World, method: str, path: str, body: bytes, *, role: str = "admin",
        **headers: str) -> httpx.Response:
    return world.call(method, path, role=role, content=body,
                      headers={"content-type": "application/json", **headers})


# -- one door: every route checks its request before its endpoint runs ----------------------
def test_every_route_of_the_app_is_checked() -> None:
    store = connect("memory://")
    try:
        app = create_app(store)
    finally:
        store.close()
    routes: list[APIRoute] = []
    todo: list[Any] = list(app.routes)
    while todo:  # included routers keep their routes (FastAPI serves them from there)
        route = todo.pop()
        inner = getattr(route, "original_router", None)
        todo.extend(inner.routes if inner is not None else [])
        if isinstance(route, APIRoute):
            routes.append(route)
    unchecked = [r.path for r in routes if not isinstance(r, CheckedRoute)
                 and r.path not in ("/healthz", "/readyz", "/metrics")]
    assert len(routes) > 40 and not unchecked


# -- NUL characters wherever a string goes --------------------------------------------------
def nul_variants(url: str, kwargs: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """The sample request with one string at a time given a NUL: each id in the path, each
    query parameter, each string of the JSON body. With the field the refusal names."""
    parts = url.split("/")
    for i in range(3, len(parts)):
        if parts[i] and parts[i] not in LITERALS:
            yield "/".join([*parts[:i], quote(parts[i] + "\x00"), *parts[i + 1:]]), kwargs, "path."
    for name in kwargs.get("params", {}):
        params = {**kwargs["params"], name: f"{kwargs['params'][name]}\x00"}
        yield url, {**kwargs, "params": params}, f"query.{name}"
    body = kwargs.get("json")
    if isinstance(body, dict):
        for where, changed in _with_nul(body, "body"):
            yield url, {**kwargs, "json": changed}, where


def _with_nul(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, str):
        yield where, value + "\x00"
    elif isinstance(value, dict):
        for key, inner in value.items():
            for path, changed in _with_nul(inner, f"{where}.{key}"):
                yield path, {**value, key: changed}
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            for path, changed in _with_nul(inner, f"{where}.{i}"):
                yield path, [*value[:i], changed, *value[i + 1:]]


def test_a_nul_anywhere_in_any_request_is_refused_naming_it(world: World) -> None:
    fx = acme(world)
    tried: set[str] = set()
    for (method, _), sample in SAMPLES.items():
        if method not in ("GET", "POST", "PUT", "DELETE"):
            continue
        url, kwargs = sample(world, fx)
        if url.endswith("/stream"):
            kwargs = {**kwargs, "params": {"after": "0"}}
        for bad_url, bad, field in nul_variants(url, kwargs):
            role = "approver" if "/decision" in url else "intake" if "/intake/" in url \
                else "admin"
            unchanged(world, field, world.call, method, bad_url, role=role, **bad)
            tried.add(f"{method} {bad_url if field == 'path.' else url} {field}")
    assert len(tried) >= 40, sorted(tried)


def test_the_known_nul_witnesses(world: World) -> None:
    run_id = world.start()
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("GET", f"/v1/runs/{run_id}%00", {}, "path.run_id"),
        ("GET", "/v1/runs/x%00/events", {}, "path.run_id"),
        ("GET", "/v1/runs", {"params": {"q": "rem\x00"}}, "query.q"),
        ("GET", "/v1/runs", {"params": {"flow": "reminders\x00"}}, "query.flow"),
        ("POST", f"/v1/runs/{run_id}/signals",
         {"json": {"name": "paid", "signal_id": "s\x00"}}, "body.signal_id"),
        ("POST", "/v1/api-keys", {"json": {"role": "viewer", "name": "k\x00"}}, "body.name"),
        ("GET", "/v1/access-log", {"params": {"by": "x\x00"}}, "query.by"),
        ("GET", "/v1/audit/verify", {"params": {"run_id": "x\x00"}}, "query.run_id"),
        ("DELETE", "/v1/api-keys/x%00", {}, "path.key_id"),
    ]
    for method, path, kwargs, field in cases:
        unchanged(world, field, world.call, method, path, **kwargs)


# -- numbers and strings JSON cannot carry ---------------------------------------------------
@pytest.mark.parametrize(("body", "field"), [
    (b'{"flow": "reminders", "start_at": NaN}', "body.start_at"),
    (b'{"flow": "reminders", "deadline": Infinity}', "body.deadline"),
    (b'{"flow": "reminders", "deadline": 1e309}', "body.deadline"),
    (b'{"flow": "reminders", "start_at": -1e309}', "body.start_at"),
    (b'{"flow": "reminders", "start_at": 1e300}', "body.start_at"),
    (b'{"flow": "reminders", "deadline": -5}', "body.deadline"),
    (b'{"flow": "reminders", "input": {"amount": NaN}}', "body.input.amount"),
    (b'{"flow": "reminders", "input": {"invoice": "\\ud800"}}', "body.input.invoice"),
    (b'{"flow": "reminders", "input": {"\\udfff": 1}}', "body.input"),
    (b'{"flow": "reminders", "input": ' + DEEP + b"}", "body"),
])
def test_a_start_with_what_json_cannot_carry_is_refused(world: World, body: bytes,
                                                        field: str) -> None:
    unchanged(world, field, raw, world, "POST", "/v1/runs", body, role="operator")


def test_signals_and_cancels_with_what_json_cannot_carry_are_refused(world: World) -> None:
    run_id = world.start()
    for body, field in [
        (b'{"name": "paid", "payload": NaN}', "body.payload"),
        (b'{"name": "paid", "payload": [1, -Infinity]}', "body.payload.1"),
        (b'{"name": "paid", "payload": {"a": 1e400}}', "body.payload.a"),
        (b'{"name": "paid", "payload": "\\ud800"}', "body.payload"),
        (b'{"name": "paid", "payload": ' + DEEP + b"}", "body"),
    ]:
        unchanged(world, field, raw, world, "POST", f"/v1/runs/{run_id}/signals", body)
    for body, field in [(b'{"reason": "\\ud800"}', "body.reason"),
                        (b'{"reason": "why\\u0000"}', "body.reason")]:
        unchanged(world, field, raw, world, "POST", f"/v1/runs/{run_id}/cancel", body)


def test_a_deep_signed_intake_body_is_refused_before_it_is_parsed(world: World) -> None:
    body = b'{"entity_id": "INV-9", "event_type": "invoice.created", "payload": ' + DEEP + b"}"
    headers = webhooks.sign(SECRET, body, at=world.clock.now())
    unchanged(world, "body", raw, world, "POST", "/v1/intake/billing", body, role="intake",
              **headers)
    nan = b'{"entity_id": "INV-9", "event_type": "invoice.created", "payload": NaN}'
    unchanged(world, "body.payload", raw, world, "POST", "/v1/intake/billing", nan,
              role="intake", **webhooks.sign(SECRET, nan, at=world.clock.now()))


# -- credentials -----------------------------------------------------------------------------
@pytest.mark.parametrize("token", ["uwk_é", "uwk_0123456789abcdef_é", "clé"])
def test_a_non_ascii_api_token_is_refused(world: World, token: str) -> None:
    auth = f"Bearer {token}".encode()
    unchanged(world, "header.authorization", world.http.get, "/v1/runs",
              headers={"Authorization": auth})
    unchanged(world, "header.authorization", world.http.post, "/v1/runs",
              json={"flow": "reminders"}, headers={"Authorization": auth})


@pytest.mark.parametrize("token", ["uwk_é", "uwk_0123456789abcdef_\x00", "\ud800"])
def test_the_console_sign_in_refuses_a_token_no_key_has(world: World, token: str) -> None:
    with httpx.Client(base_url=world.server.url, timeout=30.0) as browser:
        form = browser.get("/login")
        csrf = login_form_token(form.text)
        before = stored(world)
        data = {"token": token, "csrf": csrf, "next": "/runs"}
        r = browser.post("/login", content=_form(data),
                         headers={"content-type": "application/x-www-form-urlencoded"})
        assert 400 <= r.status_code < 500, r.text
        if "\x00" in token:
            refused(r, "form.token")
        assert stored(world) == before
        # A form token a cookie never held (non-ASCII) is refused too, not compared.
        data = {"token": "x", "csrf": "é" + csrf, "next": "/runs"}
        r = browser.post("/login", content=_form(data),
                         headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 403, r.text


def _form(data: dict[str, str]) -> bytes:
    """An urlencoded form, lone surrogates kept (as a hostile client may send them)."""
    return "&".join(f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'))}"
                    for k, v in data.items()).encode()


def test_a_forged_session_cookie_is_no_session(world: World) -> None:
    """A cookie is read before its MAC is checked: a deep, NaN-laden or NUL-holding one
    is no session (the sign-in page), never a 5xx, and the store is not asked about it."""
    def cookie(body: bytes) -> str:
        return base64.urlsafe_b64encode(body).decode().rstrip("=") + ".mac"

    # (Deeper than the interpreter's stack; short enough for a header.)
    for body in (b"[" * 3000 + b"]" * 3000, b'{"k": "0123456789abcdef", "e": NaN, "n": "x"}',
                 b'{"k": "0123456789abcde\\u0000", "e": 1e12, "n": "x"}',
                 b'{"k": "\\ud800", "e": 1e12, "n": "x"}', b'{"k": 1, "e": 1e999, "n": 2}'):
        with httpx.Client(base_url=world.server.url, timeout=30.0,
                          cookies={"uw_session": cookie(body)}) as browser:
            before = stored(world)
            r = browser.get("/runs", headers={"accept": "text/html"})
            assert r.status_code == 303 and r.headers["location"].startswith("/login")
            assert browser.post("/runs/x/cancel", data={"csrf": "x"}).status_code == 401
            assert stored(world) == before


# -- the console's forms ---------------------------------------------------------------------
def test_the_console_refuses_what_its_forms_cannot_store(world: World) -> None:
    run_id = world.start()
    with sign_in(world, role="operator") as browser:
        csrf = csrf_of(browser.get(f"/runs/{run_id}").text)
        for action, data, field in [
            ("signal", {"name": "paid", "payload": "[" * 40_000 + "]" * 40_000},
             "form.payload"),
            ("signal", {"name": "paid", "payload": '{"a": NaN}'}, "form.payload.a"),
            ("signal", {"name": "paid", "payload": '"\\u0000"'}, "form.payload"),
            ("signal", {"name": "paid\x00"}, "form.name"),
            ("cancel", {"reason": "why\x00"}, "form.reason"),
            ("resolve", {"resolution": "retry", "result": "1e999"}, "form.result"),
        ]:
            body = _form({"csrf": csrf, **data})
            before = stored(world)
            r = browser.post(f"/runs/{run_id}/{action}", content=body, headers={
                "content-type": "application/x-www-form-urlencoded"})
            assert 400 <= r.status_code < 500, (action, r.status_code, r.text)
            assert field in r.text, (action, r.text[:300])
            assert stored(world) == before
        # What a browser's page gets: an error page naming the field, not a problem.
        r = browser.post(f"/runs/{run_id}/cancel", content=_form({"csrf": csrf,
                                                                  "reason": "\x00"}),
                         headers={"content-type": "application/x-www-form-urlencoded",
                                  "accept": "text/html"})
        assert r.status_code == 422 and "text/html" in r.headers["content-type"]
        assert "form.reason" in r.text
        r = browser.get("/runs", params={"q": "a\x00"})
        refused(r, "query.q")


# -- cursors ---------------------------------------------------------------------------------
def test_cursors_past_64_bits_or_not_numbers_are_refused(world: World) -> None:
    run_id = world.start()
    for after in (str(2**63), str(10**30), "-1", "abc", "1.5"):
        for path in (f"/v1/runs/{run_id}/events", f"/v1/runs/{run_id}/events/stream"):
            unchanged(world, "query.after", world.call, "GET", path, params={"after": after})
    assert world.call("GET", f"/v1/runs/{run_id}/events",
                      params={"after": str(MAX_INT)}).json() == []
    for last in (str(2**63), "-1", "abc", "²"):
        unchanged(world, "header.last-event-id", world.call, "GET",
                  f"/v1/runs/{run_id}/events/stream", headers={"last-event-id": last.encode()})
    for since in ("nan", "inf", "-Infinity", "1e309"):
        unchanged(world, "query.created_since", world.call, "GET", "/v1/runs",
                  params={"created_since": since})
    # A runs cursor is base64url of [time, run id]: one holding NaN or a NUL is no cursor.
    for inner in (b'[NaN, "x"]', b'[1, "\\u0000"]', b"[1e999, \"x\"]"):
        cursor = base64.urlsafe_b64encode(inner).decode().rstrip("=")
        unchanged(world, "query.cursor", world.call, "GET", "/v1/runs",
                  params={"cursor": cursor})
    for cursor in ("0", "-5", "x" * 30):
        unchanged(world, "query.cursor", world.call, "GET", "/v1/access-log",
                  params={"cursor": cursor})


# -- the body limit --------------------------------------------------------------------------
def test_a_body_over_the_limit_gets_413_before_it_is_parsed(world: World) -> None:
    big = json.dumps({"flow": "reminders", "input": "x" * (1024 * 1024)}).encode()
    unchanged(world, "body", raw, world, "POST", "/v1/runs", big, role="operator")

    def chunks() -> Iterator[bytes]:
        yield b'{"flow": "reminders", "input": "'
        for _ in range(300):
            yield b"x" * 4096
        yield b'"}'

    def chunked() -> httpx.Response:
        return world.call("POST", "/v1/runs", role="operator", content=chunks(),
                          headers={"content-type": "application/json"})
    before = stored(world)
    r = chunked()
    assert r.status_code == 413 and r.headers["content-type"].startswith(PROBLEM), r.text
    assert "body" in r.json()["detail"] and stored(world) == before
    # Under the limit is read, however long one string of it is.
    fits = json.dumps({"flow": "reminders", "input": "x" * 900_000}).encode()
    assert raw(world, "POST", "/v1/runs", fits, role="operator").status_code == 201


def test_the_body_limit_is_configurable(db_url: str) -> None:
    store = connect(db_url)
    try:
        key = issue_key(store, tenant_id="acme", role="operator", now=0.0).token
        app = create_app(store, max_body_bytes=200)
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            headers = {"Authorization": f"Bearer {key}"}
            r = http.post("/v1/runs", json={"flow": "f", "input": "x" * 300},
                          headers=headers)
            assert r.status_code == 413, r.text
            assert http.post("/v1/runs", json={"flow": "f"},
                             headers=headers).status_code == 201
    finally:
        store.close()
    with pytest.raises(uw.ConfigurationError, match="max_body_bytes"):
        create_app(connect("memory://"), max_body_bytes=0)


# -- the Python surface refuses the same ------------------------------------------------------
def test_the_client_refuses_what_the_store_cannot_hold(db_url: str) -> None:
    client = uw.Client(connect(db_url))
    try:
        for kwargs, field in [
            ({"input": {"a": float("nan")}}, "input.a"),
            ({"input": ["\x00"]}, "input.0"),
            ({"input": "\ud800"}, "input"),
            ({"start_at": float("nan")}, "start_at"),
            ({"deadline": float("inf")}, "deadline"),
            ({"start_at": 1e300}, "start_at"),
            ({"queue": "q\x00"}, "queue"),
        ]:
            with pytest.raises(InvalidInput) as caught:
                client.start("f", **kwargs)
            assert caught.value.field == field
        assert client.list_runs().runs == []
        run_id, _ = client.start("f", {"a": 1})
        with pytest.raises(InvalidInput, match=r"payload\.x"):
            client.signal(run_id, "go", {"x": float("-inf")})
        with pytest.raises(InvalidInput, match="reason"):
            client.cancel(run_id, by="me", reason="\x00")
    finally:
        client.store.close()
