"""``underway.http.request`` records what the response says, against a real local server.

A 2xx answer is a success whatever its body (the effect happened): a body that is not JSON
is kept as text with its content type. 429/503 carry the service's ``Retry-After`` (seconds
or an HTTP date). A mutating request whose answer is lost after it was sent — a reset, a
malformed answer, a read timeout — raises ``OutcomeUnknown`` and is never retried by a retry
policy; a failure before anything was sent (connection refused) is an ordinary error.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.http import HTTPError, Response, request, retry_after_seconds
from underway.retry import RetryPolicy
from underway.testing import memory_engine

SECRET = "tok-5ecret"


class Service(BaseHTTPRequestHandler):
    """Answers by path; counts every request that reached it (its body was read)."""

    seen: list[tuple[str, str]] = []
    release = threading.Event()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        Service.seen.append((self.command, self.path))
        path = self.path.split("?")[0]
        if path == "/reset":
            # Abort the connection: SO_LINGER 0 makes close() send a RST.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if path == "/hangup":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if path == "/garbage":
            self.wfile.write(b"HTTP/1.1 two hundred\r\n\r\n")
            self.close_connection = True
            return
        if path == "/slow":
            Service.release.wait(10)
            return self._send(200, "application/json", b'{"late": true}')
        status, ctype, body, extra = {
            "/json": (200, "application/json; charset=utf-8", b'{"ok": true, "n": 1}', {}),
            "/text": (200, "text/plain; charset=utf-8", b"queued as Q-17", {}),
            "/html": (201, "text/html", b"<p>created</p>", {}),
            "/badjson": (200, "application/json", b"{nope", {}),
            "/nan": (200, "application/json", b"NaN", {}),
            "/empty": (204, None, b"", {}),
            "/limited": (429, "application/json", b'{"error": "slow down"}',
                         {"Retry-After": "7"}),
            "/down": (503, "text/plain", f"down; token {SECRET}".encode(),
                      {"Retry-After": formatdate(time.time() + 120, usegmt=True)}),
            "/down-garbled": (503, "text/plain", b"down", {"Retry-After": "soon-ish"}),
            "/missing": (404, "text/plain", b"no such thing", {}),
        }[path]
        self._send(status, ctype, body, extra)

    def _send(self, status: int, ctype: str | None, body: bytes,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if ctype is not None:
            self.send_header("Content-Type", ctype)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the aborted connections above are on purpose


@pytest.fixture
def base() -> Iterator[str]:
    Service.seen = []
    Service.release.clear()
    httpd = QuietServer(("127.0.0.1", 0), Service)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    Service.release.set()
    httpd.shutdown()
    httpd.server_close()
    t.join(10)


INFO = uw.CallInfo("run-1:0:send:0", "t", "run-1", "send", 0, fence=3,
                   secrets={"TOKEN": SECRET})


def call(method: str, url: str, **kw: Any) -> Response:
    result: Response = asyncio.run(request(method, url, info=INFO, **kw))
    return result


# -- what a 2xx says --------------------------------------------------------------------------


def test_a_json_answer_is_decoded(base: str) -> None:
    r = call("POST", f"{base}/json", json_body={"a": 1})
    assert (r.status, r.body, r.is_json, r.content_type) == (
        200, {"ok": True, "n": 1}, True, "application/json")


@pytest.mark.parametrize(("path", "status", "ctype", "body"), [
    ("/text", 200, "text/plain", "queued as Q-17"),
    ("/html", 201, "text/html", "<p>created</p>"),
    ("/badjson", 200, "application/json", "{nope"),
    ("/nan", 200, "application/json", "NaN"),
])
@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_2xx_that_is_not_json_is_a_success_with_its_text(
    base: str, method: str, path: str, status: int, ctype: str, body: str,
) -> None:
    r = call(method, f"{base}{path}", json_body={"a": 1} if method == "POST" else None)
    assert (r.status, r.body, r.text, r.content_type, r.is_json) == (
        status, body, body, ctype, False)
    assert r.record() == {"status": status, "content_type": ctype, "body": body}
    json.dumps(r.record(), allow_nan=False)  # journalable as it is
    assert Service.seen == [(method, path)]


def test_an_empty_answer_is_none(base: str) -> None:
    r = call("DELETE", f"{base}/empty")
    assert (r.status, r.body, r.text, r.is_json) == (204, None, "", False)


# -- what an error status says ----------------------------------------------------------------


def test_429_carries_retry_after_in_seconds(base: str) -> None:
    with pytest.raises(HTTPError) as err:
        call("POST", f"{base}/limited", json_body={})
    e = err.value
    assert (e.status, e.retryable, e.retry_after) == (429, True, 7.0)
    assert e.body == '{"error": "slow down"}'


def test_503_carries_retry_after_as_an_http_date_and_hides_secrets(base: str) -> None:
    with pytest.raises(HTTPError) as err:
        call("POST", f"{base}/down", json_body={})
    e = err.value
    assert e.status == 503 and e.retryable
    assert e.retry_after is not None and 115 <= e.retry_after <= 121
    assert SECRET not in str(e) and SECRET not in e.body


def test_an_unreadable_retry_after_is_ignored_and_4xx_is_not_retryable(base: str) -> None:
    with pytest.raises(HTTPError) as err:
        call("POST", f"{base}/down-garbled", json_body={})
    assert err.value.retry_after is None and err.value.retryable
    with pytest.raises(HTTPError) as err:
        call("GET", f"{base}/missing")
    assert (err.value.status, err.value.retryable, err.value.retry_after) == (404, False, None)


@pytest.mark.parametrize(("value", "seconds"), [
    ("0", 0.0), ("120", 120.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 30.0),
    ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0), ("-5", None), ("1e3", None), ("", None),
    (None, None), ("tomorrow", None),
])
def test_retry_after_values(value: str | None, seconds: float | None) -> None:
    now = 1445412450.0  # 07:27:30 GMT that day
    assert retry_after_seconds(value, now=now) == seconds


def test_the_retry_policy_waits_what_the_service_asked_within_its_bound() -> None:
    policy = RetryPolicy(initial_interval=1.0, max_retry_after=600.0)
    assert policy.delay(2, 0.5) == 0.5
    assert policy.delay(2, 0.5, hint=7.0) == 7.0
    assert policy.delay(2, 0.5, hint=86400.0) == 600.0
    assert policy.delay(2, 0.5, hint=-3.0) == 0.0
    assert policy.delay(2, 0.5, hint=float("nan")) == 0.5
    with pytest.raises(uw.ConfigurationError):
        RetryPolicy(max_retry_after=-1)


# -- a lost answer ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/reset", "/hangup", "/garbage"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_a_mutating_request_whose_answer_is_lost_has_an_unknown_outcome(
    base: str, method: str, path: str,
) -> None:
    with pytest.raises(uw.OutcomeUnknown) as err:
        call(method, f"{base}{path}", json_body={"amount": 5})
    assert Service.seen == [(method, path)], "the request did reach the service"
    assert err.value.retryable is False and err.value.method == method
    assert "may have taken effect" in str(err.value)


def test_a_read_timeout_after_sending_is_an_unknown_outcome(base: str) -> None:
    with pytest.raises(uw.OutcomeUnknown, match="ReadTimeout"):
        call("POST", f"{base}/slow", json_body={}, timeout=0.3)
    assert Service.seen == [("POST", "/slow")]


@pytest.mark.parametrize("path", ["/reset", "/hangup", "/garbage"])
def test_a_safe_request_whose_answer_is_lost_is_an_ordinary_error(base: str, path: str) -> None:
    with pytest.raises(httpx.TransportError):
        call("GET", f"{base}{path}")


def test_a_request_that_never_left_is_an_ordinary_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port now: the connection is refused before anything is sent.
    with pytest.raises(httpx.ConnectError):
        call("POST", f"http://127.0.0.1:{port}/pay", json_body={"amount": 5})


# -- in a flow --------------------------------------------------------------------------------


class S(BaseModel):
    pass


def http_flow(name: str, url: str, retry: RetryPolicy | None) -> tuple[uw.Flow[S, Any], Any]:
    @uw.tool(name=f"{name}_post", retry=retry)
    async def post(args: dict[str, Any], info: uw.CallInfo) -> dict[str, Any]:
        return (await request("POST", url, info=info, json_body=args)).record()

    flow: uw.Flow[S, Any] = uw.Flow(name, state=S, tools=[post])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            return ctx.done(await ctx.call(post, {"amount": 5}))
        except uw.ToolCallError as exc:
            return ctx.done({"error": exc.error_type})

    return flow, post


def events_of(engine: uw.Engine, run_id: str) -> list[ev.Event]:
    return [r.event for r in engine.journal.history("default", run_id)]


def test_a_flow_journals_a_text_answer_as_a_success(db_url: str, base: str) -> None:
    flow, _ = http_flow("text_answer", f"{base}/text", RetryPolicy(max_attempts=3))
    store = uw.connect(db_url)
    engine = uw.Engine(store, flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        done = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
        recorded = {"status": 200, "content_type": "text/plain", "body": "queued as Q-17"}
        assert done.status == "completed" and done.result == recorded
        [ok] = [e for e in events_of(engine, run_id) if isinstance(e, ev.ToolSucceeded)]
        assert ok.result == recorded
        assert not [e for e in events_of(engine, run_id) if isinstance(e, ev.ToolFailed)]
        assert Service.seen == [("POST", "/text")]
    finally:
        store.close()


def test_a_lost_answer_is_never_retried_by_the_retry_policy(db_url: str, base: str) -> None:
    flow, _ = http_flow("lost_answer", f"{base}/reset", RetryPolicy(max_attempts=5,
                                                                    initial_interval=0))
    store = uw.connect(db_url)
    engine = uw.Engine(store, flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        for _ in range(3):
            asyncio.run(uw.Runner(engine).run_until_idle())
        journal = events_of(engine, run_id)
        assert Service.seen == [("POST", "/reset")], "sent once, never repeated blindly"
        assert not [e for e in journal if isinstance(e, ev.RetryScheduled | ev.ToolSucceeded)]
        # Never journaled as a failure: an unknown outcome, for a person to settle.
        assert not [e for e in journal if isinstance(e, ev.ToolFailed)]
        assert [e.error_type for e in journal if isinstance(e, ev.ToolOutcomeUnknown)] == [
            "OutcomeUnknown"]
    finally:
        store.close()


def test_the_engine_waits_the_retry_after_the_service_asked_for(base: str) -> None:
    flow, _ = http_flow("limited", f"{base}/limited", RetryPolicy(max_attempts=3,
                                                                 initial_interval=0.5))
    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    asyncio.run(uw.Runner(engine).run_until_idle())
    [scheduled] = [e for e in events_of(engine, run_id) if isinstance(e, ev.RetryScheduled)]
    assert scheduled.delay_s == 7.0
