"""Egress allow-lists, credentials refused by a service, and secrets bound to environments,
against a real local HTTP server and real stores.

* A tool that declares ``hosts`` reaches those hosts and no other: a request elsewhere —
  first, or after a redirect — is refused before anything is sent, the refusal is
  journaled (``ToolRefused``, ``egress_denied``), and the call fails even when the tool
  caught the error.
* A 401 makes the engine refresh the tool's secrets and try once more; refused again, the
  run escalates to a person. Never a quiet failure.
* A worker in ``dev`` is refused a ``prod`` secret before the tool runs, journaled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.egress import host_allowed, host_patterns
from underway.errors import ConfigurationError, EgressDenied, OutcomeUnknown
from underway.http import Response, ResponseInvalid, request
from underway.secrets import BoundSecrets, CallbackSecrets

FRESH = "tok-fresh-2"


class Service(BaseHTTPRequestHandler):
    """``/ok``: 200; ``/hop``: a redirect to ``localhost`` (another host name); ``/auth``:
    200 only with the fresh token, else 401. Remembers every request that arrived."""

    seen: list[str] = []

    def do_GET(self) -> None:
        Service.seen.append(self.path)
        port = self.server.server_address[1]
        if self.path == "/hop":
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{port}/ok")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/auth" and self.headers.get("Authorization") != f"Bearer {FRESH}":
            return self._json(401, b'{"error": "token expired"}')
        self._json(200, b'{"ok": true}')

    do_POST = do_GET

    def _json(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    Service.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    t.join(10)


class S(BaseModel):
    pass


def one_call_flow(name: str, t: uw.Tool, args: Any = None) -> uw.Flow[S, Any]:
    flow: uw.Flow[S, Any] = uw.Flow(name, state=S, tools=[t])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        try:
            return ctx.done(await ctx.call(t, args or {}))
        except uw.ToolCallError as exc:
            return ctx.done({"error": exc.error_type, "message": exc.message})

    return flow


def events_of(engine: uw.Engine, run_id: str) -> list[ev.Event]:
    return [r.event for r in engine.journal.history("default", run_id)]


def run(engine: uw.Engine, flow: uw.Flow[S, Any]) -> tuple[str, Any]:
    run_id, _ = engine.start(flow)
    asyncio.run(uw.Runner(engine).run_until_idle())
    return run_id, engine.state(run_id)


# -- egress -----------------------------------------------------------------------------------


def test_host_patterns_are_checked_and_matched() -> None:
    pats = host_patterns(["API.Example.com.", "*.bank.in", "127.0.0.1", "[::1]"], owner="t")
    assert pats == ("api.example.com", "*.bank.in", "127.0.0.1", "::1")
    assert host_allowed("api.example.com", pats) and host_allowed("eu.api.bank.in", pats)
    assert host_allowed("::1", pats) and host_allowed("[::1]", pats)
    assert not host_allowed("bank.in", pats) and not host_allowed("evilbank.in", pats)
    assert not host_allowed("api.example.com.evil.org", pats)
    for bad, says in [("https://api.example.com", "bare host name"),
                      ("api.example.com:443", "bare host name"), ("*.com", "top-level"),
                      ("a.*.example.com", "wildcard only"), ("*.10.0.0.1", "IP address")]:
        with pytest.raises(ConfigurationError, match=says):
            host_patterns([bad], owner="tool 'pay'")
    with pytest.raises(ConfigurationError, match="not the string"):
        uw.tool(hosts="api.example.com")(lambda: None)  # type: ignore[call-overload]


@pytest.mark.parametrize("catch", [False, True], ids=["raised", "caught by the tool"])
def test_a_request_to_an_undeclared_host_is_refused_journaled_and_never_sent(
    db_url: str, base: str, catch: bool,
) -> None:
    @uw.tool(name="pay", hosts=["payments.example.com"])
    async def pay(args: Any, info: uw.CallInfo) -> dict[str, Any]:
        try:
            return (await request("POST", f"{base}/ok", info=info, json_body={})).record()
        except EgressDenied:
            if not catch:
                raise
            return {"quietly": "went on"}

    store = uw.connect(db_url)
    try:
        engine = uw.Engine(store, flows=[flow := one_call_flow("egress_refused", pay)])
        run_id, state = run(engine, flow)
        assert state.status == "completed"
        assert state.result["error"] == "EgressDenied"
        assert "may reach only payments.example.com" in state.result["message"]
        assert Service.seen == [], "nothing was sent"
        [refused] = [e for e in events_of(engine, run_id) if isinstance(e, ev.ToolRefused)]
        assert refused.cause == "egress_denied" and refused.tool == "pay"
        assert f"refused {base}/ok" in refused.reason
        assert not [e for e in events_of(engine, run_id) if isinstance(e, ev.ToolSucceeded)]
    finally:
        store.close()


def test_a_declared_host_is_reached_and_a_redirect_elsewhere_is_refused(base: str) -> None:
    @uw.tool(name="fetch", read_only=True, hosts=["127.0.0.1"])
    async def fetch(args: Any, info: uw.CallInfo) -> dict[str, Any]:
        return (await request("GET", f"{base}{args['path']}", info=info)).record()

    engine, _ = uw.testing.memory_engine([flow := one_call_flow("egress_ok", fetch,
                                                                {"path": "/ok"})])
    _, state = run(engine, flow)
    assert state.result == {"status": 200, "content_type": "application/json",
                            "body": {"ok": True}}
    Service.seen = []
    hop = one_call_flow("egress_hop", fetch, {"path": "/hop"})
    engine.register(hop)
    run_id, state = run(engine, hop)
    assert state.result["error"] == "EgressDenied"
    assert Service.seen == ["/hop"], "the redirect's target on localhost was never asked"
    [refused] = [e for e in events_of(engine, run_id) if isinstance(e, ev.ToolRefused)]
    assert "host 'localhost'" in state.result["message"] or "localhost" in refused.reason


# -- credentials a service refuses ------------------------------------------------------------


class Vault:
    """A caching secret provider: hands out the token it holds until asked to refresh."""

    def __init__(self, *, renews: bool) -> None:
        self.token, self.renews, self.refreshed = "tok-expired-1", renews, 0

    def get(self, name: str) -> str:
        return self.token

    def refresh(self, name: str) -> None:
        self.refreshed += 1
        if self.renews:
            self.token = FRESH


def auth_tool(base: str) -> uw.Tool:
    @uw.tool(name="charge", secrets=("PSP_TOKEN",))  # mutating, not idempotent
    async def charge(args: Any, info: uw.CallInfo) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {info.secrets['PSP_TOKEN']}"}
        return (await request("POST", f"{base}/auth", info=info, json_body={},
                              headers=headers)).record()
    return charge


def test_expired_credentials_are_refreshed_and_the_call_tried_once_more(
    db_url: str, base: str,
) -> None:
    vault = Vault(renews=True)
    store = uw.connect(db_url)
    try:
        flow = one_call_flow("refreshed", auth_tool(base))
        engine = uw.Engine(store, flows=[flow], secrets=vault)
        run_id, _ = engine.start(flow)
        done = asyncio.run(uw.Runner(engine, poll=0.01).run_until_complete(run_id))
        assert done.status == "completed" and done.result["body"] == {"ok": True}
        assert vault.refreshed == 1 and Service.seen == ["/auth", "/auth"]
        journal = events_of(engine, run_id)
        [failed] = [e for e in journal if isinstance(e, ev.ToolFailed)]
        assert failed.error_type == "HTTPError" and "401" in failed.message
        assert "tok-expired-1" not in failed.message
        assert [e.attempt for e in journal if isinstance(e, ev.RetryScheduled)] == [2]
    finally:
        store.close()


def test_credentials_refused_again_after_a_refresh_go_to_a_person(db_url: str,
                                                                  base: str) -> None:
    vault = Vault(renews=False)
    store = uw.connect(db_url)
    try:
        flow = one_call_flow("still_refused", auth_tool(base))
        engine = uw.Engine(store, flows=[flow], secrets=vault)
        run_id, _ = engine.start(flow)
        for _ in range(3):
            asyncio.run(uw.Runner(engine, poll=0.01).run_until_idle())
        state = engine.state(run_id)
        assert state.status == "escalated", state.status
        [esc] = [e for e in events_of(engine, run_id) if isinstance(e, ev.Escalated)]
        assert esc.cause == "credentials" and esc.tool == "charge"
        assert "refused the credentials of tool 'charge'" in esc.reason
        assert Service.seen == ["/auth", "/auth"] and vault.refreshed == 1
    finally:
        store.close()


class BrokenVault(Vault):
    """A provider whose ``get`` or ``refresh`` raises or never answers."""

    def __init__(self, where: str, how: str) -> None:
        super().__init__(renews=True)
        self.where, self.how = where, how
        self.release = threading.Event()

    def _fail(self) -> None:
        if self.how == "raise":
            raise RuntimeError("the vault is sealed")
        self.release.wait(60)  # never answers within the hook's time

    def get(self, name: str) -> str:
        if self.where == "get":
            self._fail()
        return super().get(name)

    def refresh(self, name: str) -> None:
        if self.where == "refresh":
            self._fail()
        super().refresh(name)


@pytest.mark.parametrize("how", ["raise", "hang"])
@pytest.mark.parametrize("where", ["get", "refresh"])
def test_a_secret_provider_that_fails_is_a_hook_that_fails(
    db_url: str, base: str, where: str, how: str,
) -> None:
    """``get`` failing: the call fails before anything is sent. ``refresh`` failing after
    a refusal: the call goes to a person, naming the hook. Never a stuck worker."""
    vault = BrokenVault(where, how)
    store = uw.connect(db_url)
    try:
        charge = dataclasses.replace(auth_tool(base), hook_timeout=0.5)
        flow = one_call_flow(f"vault_{where}_{how}", charge)
        engine = uw.Engine(store, flows=[flow], secrets=vault)
        run_id, _ = engine.start(flow)
        for _ in range(3):
            asyncio.run(uw.Runner(engine, poll=0.01).run_until_idle())
        state = engine.state(run_id)
        journal = events_of(engine, run_id)
        if where == "get":
            assert Service.seen == [], "a call without its secrets was sent"
            [failed] = [e for e in journal if isinstance(e, ev.ToolFailed)]
            assert failed.error_type == "SecretUnavailable"
            assert "the secret provider" in failed.message and "get" in failed.message
        else:
            assert Service.seen == ["/auth"] and state.status == "escalated"
            [esc] = [e for e in journal if isinstance(e, ev.Escalated)]
            assert (esc.cause, esc.hook) == ("credentials", "refresh")
            assert "could not refresh them" in esc.reason
    finally:
        vault.release.set()
        store.close()


# -- secrets bound to environments ------------------------------------------------------------


def test_a_dev_worker_is_refused_a_production_secret_before_the_tool_runs(db_url: str) -> None:
    ran: list[str] = []

    @uw.tool(name="erp_read", read_only=True, secrets=("ERP_TOKEN",))
    async def erp_read(args: Any, info: uw.CallInfo) -> dict[str, Any]:
        ran.append(info.secrets["ERP_TOKEN"])
        return {}

    fetched: list[str] = []
    provider = CallbackSecrets(lambda name: fetched.append(name) or "prod-t0ken")
    store = uw.connect(db_url)
    try:
        flow = one_call_flow("bound", erp_read)
        engine = uw.Engine(store, flows=[flow], environment="dev", secrets=BoundSecrets(
            provider, {"ERP_TOKEN": "prod"}, environment="dev"))
        run_id, state = run(engine, flow)
        assert state.result["error"] == "SecretRefused"
        assert "secret 'ERP_TOKEN' belongs to environment prod" in state.result["message"]
        assert "runs in 'dev'" in state.result["message"]
        assert ran == [] and fetched == [], "never fetched, never ran"
        [refused] = [e for e in events_of(engine, run_id) if isinstance(e, ev.ToolRefused)]
        assert refused.cause == "secret_refused"

        prod = uw.Engine(store, flows=[flow], environment="prod", secrets=BoundSecrets(
            provider, {"ERP_TOKEN": ["staging", "prod"]}, environment="prod"))
        _, state = run(prod, flow)
        assert state.result == {} and ran == ["prod-t0ken"]
    finally:
        store.close()


def test_an_engine_and_its_secrets_must_agree_on_the_environment() -> None:
    bound = BoundSecrets(CallbackSecrets(lambda n: "x"), {"A": "prod"}, environment="prod")
    with pytest.raises(ConfigurationError, match=r"serves environment 'prod'.*runs in 'dev'"):
        uw.Engine(uw.testing.memory_engine([])[0].store, secrets=bound)
    with pytest.raises(ConfigurationError, match="bound to one or more environment"):
        BoundSecrets(CallbackSecrets(lambda n: "x"), {"A": []}, environment="dev")


# -- reading an answer as the model a tool expects --------------------------------------------


class Ok(BaseModel):
    ok: bool


class Receipt(BaseModel):
    receipt_id: str


def test_expect_reads_the_model_or_says_loudly_what_is_wrong(base: str) -> None:
    info = uw.CallInfo("r:0:s:0", "t", "r", "s", 0)
    got = asyncio.run(request("GET", f"{base}/ok", info=info))
    assert got.expect(Ok) == Ok(ok=True)
    with pytest.raises(ResponseInvalid, match=r"answered 200 with a body that is not a "
                       r"Receipt \(fields receipt_id") as read:
        got.expect(Receipt)
    assert read.value.retryable and not isinstance(read.value, OutcomeUnknown)
    posted = asyncio.run(request("POST", f"{base}/ok", info=info, json_body={}))
    with pytest.raises(ResponseInvalid) as wrote:
        posted.expect(Receipt)
    assert isinstance(wrote.value, OutcomeUnknown), "the service acted: an unknown outcome"
    cut = Response(200, {}, '{"ok": tr', '{"ok": tr', "application/json", False, "POST", "u")
    with pytest.raises(OutcomeUnknown, match="a body that is not JSON"):
        cut.expect(Ok)


def test_a_reconcile_hook_is_held_to_its_tools_hosts(base: str) -> None:
    port = base.rsplit(":", 1)[1]

    async def ask_elsewhere(key: str, info: uw.CallInfo) -> uw.Reconciled:
        await request("GET", f"http://localhost:{port}/ok", info=info)
        return uw.Reconciled.happened({})

    @uw.tool(name="transfer", hosts=["127.0.0.1"], reconcile=ask_elsewhere, timeout=2)
    async def transfer(args: Any, info: uw.CallInfo) -> dict[str, Any]:
        await request("POST", f"{base}/ok", info=info, json_body={})
        await asyncio.sleep(30)  # the answer is late: the outcome is unknown
        return {}

    engine, _ = uw.testing.memory_engine([flow := one_call_flow("reconcile_egress", transfer)])
    _, state = run(engine, flow)
    # The transfer was sent and its outcome is unknown: a hook that fails (here, refused
    # egress) leaves it to a person, naming the hook and why (docs/tools.md#hooks).
    assert state.status == "escalated" and state.escalation is not None, state.error
    why = state.escalation.reason
    assert "EgressDenied" in why and "reconcile" in why, why
    assert "may reach only 127.0.0.1" in why
    assert Service.seen == ["/ok"], "the transfer reached the service; the query never left"
