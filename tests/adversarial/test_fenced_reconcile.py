"""A non-idempotent call that timed out while its request was still on its way: the
reconcile query carries a higher fence than the attempt in doubt, so a fence-checking
service refuses that attempt when it arrives after the query — the effect happens once
(the retry), never twice. Before, the query and the attempt carried the same fence (the
lease token): the service answered "not seen", then performed the late attempt and the
retry both."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.effects import FENCE_STRIDE, fence_of
from underway.retry import RetryPolicy
from underway.testing import memory_engine


class Ledger:
    """A service that remembers the highest fence per run (checked when a request is
    processed) and performs a non-idempotent effect each time it is admitted. The first
    POST is held until the reconcile query has been answered: it arrives late."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fences: dict[str, int] = {}
        self.performed: dict[str, int] = {}
        self.refused = 0
        self.queried = threading.Event()
        self.posts = 0

    def admit(self, run: str, fence: int) -> bool:
        if fence < self.fences.get(run, 0):
            self.refused += 1
            return False
        self.fences[run] = fence
        return True


def serve(ledger: Ledger) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with ledger.lock:
                ledger.posts += 1
                first = ledger.posts == 1
            if first:
                # Still on its way when the caller gives up: it lands after the query.
                assert ledger.queried.wait(60)
            with ledger.lock:
                if not ledger.admit(body["run"], body["fence"]):
                    self._reply(409, {"error": "stale fence"})
                    return
                n = ledger.performed.get(body["key"], 0) + 1
                ledger.performed[body["key"]] = n
            self._reply(200, {"id": f"charge-{n}"})

        def do_GET(self) -> None:
            key, _, query = self.path.removeprefix("/effects/").partition("?")
            params = dict(p.split("=") for p in query.split("&"))
            with ledger.lock:
                if not ledger.admit(params["run"], int(params["fence"])):
                    self._reply(409, {"error": "stale fence"})
                    return
                seen = key in ledger.performed
            self._reply(200, {"seen": seen})
            ledger.queried.set()

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def service() -> Iterator[tuple[Ledger, str]]:
    ledger = Ledger()
    server = serve(ledger)
    yield ledger, f"http://127.0.0.1:{server.server_address[1]}"
    ledger.queried.set()
    server.shutdown()
    server.server_close()


class S(BaseModel):
    charge: str = ""


def test_a_timed_out_charge_arriving_after_the_reconcile_query_is_refused(
        service: tuple[Ledger, str]) -> None:
    ledger, base = service

    async def delivered(key: str, info: uw.CallInfo) -> uw.Reconciled:
        got = await asyncio.to_thread(_get, f"{base}/effects/{key}?run={info.run_id}"
                                            f"&fence={info.fence}")
        return uw.Reconciled.happened(None) if got["seen"] else uw.Reconciled.not_happened()

    @uw.tool(mutating=True, idempotent=False, timeout=0.5, reconcile=delivered,
             retry=RetryPolicy(max_attempts=3, initial_interval=1.0))
    def charge(args: dict[str, Any], info: uw.CallInfo) -> Any:
        return _post(f"{base}/charges", {"key": info.key, "run": info.run_id,
                                         "fence": info.fence})

    flow: uw.Flow[S, Any] = uw.Flow("charge_once", state=S)

    @flow.step(start=True)
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        sent = await ctx.call(charge, {"amount": 5})
        ctx.state.charge = str(sent["id"])
        return ctx.done(ctx.state.charge)

    engine, clock = memory_engine([flow])
    run_id, _ = engine.start(flow)
    for _ in range(10):
        asyncio.run(uw.Runner(engine).run_until_idle())
        row = engine.store.get_run("default", run_id)
        assert row is not None
        if row.status != "waiting":
            break
        clock.advance(60)
    assert row.status == "completed", row
    # The late first attempt was refused; the retry performed the charge, once.
    assert ledger.performed == {next(iter(ledger.performed)): 1}
    assert ledger.refused == 1
    kinds = [type(r.event) for r in engine.journal.history("default", run_id)]
    assert ev.ToolTimedOut in kinds and ev.ToolReconciled in kinds


def test_the_fence_grows_with_the_lease_and_with_the_journal() -> None:
    assert fence_of(1, 0) < fence_of(1, 1) < fence_of(2, 0)
    assert fence_of(2, 0) - fence_of(1, 0) == FENCE_STRIDE
    assert fence_of(1, FENCE_STRIDE + 5) < fence_of(2, 0)  # saturates below the next lease


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())
