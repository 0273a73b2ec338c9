"""The HTTP helper's idempotency headers, a per-flow deny-by-default, tenant budgets."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import drive, of_type
from underway import events as ev
from underway.guard.policy import policy_from_dict
from underway.http import HTTPError, request
from underway.testing import memory_engine


class Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.seen.append({"key": self.headers["Idempotency-Key"],
                              "fence": self.headers["Underway-Fence"], "body": body})
        self.send_response(Recorder.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok": true}' if Recorder.status == 200 else b'{"error": "busy"}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.seen, Recorder.status = [], 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/send"
    httpd.shutdown()
    httpd.server_close()


def test_the_http_helper_sends_the_call_key_and_fence(server: str) -> None:
    info = uw.CallInfo("run-1:0:send:0", "t", "run-1", "send", 0, fence=7,
                       secrets={"TOKEN": "tok-123"})
    resp = asyncio.run(request("POST", server, info=info, json_body={"to": "a"}))
    assert resp.status == 200 and resp.body == {"ok": True}
    assert Recorder.seen == [{"key": "run-1:0:send:0", "fence": "7", "body": {"to": "a"}}]
    Recorder.status = 503
    with pytest.raises(HTTPError) as err:
        asyncio.run(request("POST", server, info=info, json_body={"to": "a"}))
    assert err.value.status == 503 and err.value.retryable


class S(BaseModel):
    pass


def test_a_flow_can_deny_mutating_tools_no_rule_covers() -> None:
    @uw.tool(read_only=True)
    async def look(args: Any) -> Any:
        return "seen"

    @uw.tool(idempotent=True)
    async def change(args: Any) -> Any:
        return "changed"

    policy = policy_from_dict({"version": "1", "rules": [
        {"id": "reads", "tools": ["look"], "outcome": "allow"}]})
    flow = uw.Flow("strict", state=S, tools=[look, change], policy=policy,
                   deny_unlisted_mutating=True)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        seen = await ctx.call(look, {})
        try:
            await ctx.call(change, {})
        except uw.ToolCallError as exc:
            return ctx.done([seen, exc.error_type])
        return ctx.done([seen, "changed"])

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    assert drive(engine, run_id).result == ["seen", "PolicyDenied"]
    decided = of_type(engine, run_id, ev.PolicyDecided)
    assert [(d.tool, d.decision) for d in decided] == [("look", "allow"), ("change", "deny")]


def test_a_tenant_budget_counts_every_run_of_the_tenant() -> None:
    @uw.tool(idempotent=True, message=True)
    async def notify(args: Any) -> Any:
        return "sent"

    flow = uw.Flow("notifier", state=S, tools=[notify])

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        await ctx.call(notify, {"n": 1})
        await ctx.call(notify, {"n": 2})
        return ctx.done()

    engine, _ = memory_engine([flow])
    engine.guard.tenant_budget = uw.Budget(messages=5, on_exceed="fail")
    engine.guard.tenant_usage_ttl = 0.0
    finished = []
    for _ in range(3):
        run_id, _ = engine.start(flow, tenant_id="acme")
        finished.append(drive(engine, run_id, "acme"))
    assert [s.status for s in finished] == ["completed", "completed", "failed"]
    assert finished[2].messages == 1, "the sixth message of the day was stopped"
    over = of_type(engine, finished[2].run_id, ev.BudgetExceeded, "acme")[0]
    assert (over.scope, over.metric, over.limit) == ("tenant", "messages", 5.0)
    other, _ = engine.start(flow, tenant_id="globex")
    assert drive(engine, other, "globex").status == "completed"
