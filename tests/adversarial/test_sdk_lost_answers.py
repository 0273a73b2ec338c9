"""A mutating call made through a provider's official SDK whose answer never comes is an
unknown outcome, on the SDK's own HTTP stack (``httpx2`` in the current openai and
anthropic releases).

A local server reads each request whole, then says nothing (or, for the second
witness, cuts the connection). The tool posts through the real SDK with no retries of
its own. The request left, so the engine must journal the outcome as unknown and
escalate; it must never record a failure the step could retry under a new key. A
connection refused before anything left stays an ordinary failure. On SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.runner import Runner


class Silent:
    """A TCP server that reads a request and never answers, or closes once it has read."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.received += 1
            if self.how == "reset":
                # Linger 0: the close is a reset, after the whole request was read.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:
                self.held.append(conn)  # never answered

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture(params=["silent", "reset"])
def server(request: pytest.FixtureRequest) -> Iterator[Silent]:
    s = Silent(str(request.param))
    yield s
    s.close()


class Nothing(BaseModel):
    pass


def flow_of(sdk: str, base_url: str) -> uw.Flow[Nothing, Any]:
    @uw.tool(name=f"{sdk}_post", mutating=True, timeout=30)
    async def post(args: dict[str, Any]) -> dict[str, Any]:
        """Send a request that acts (a completion billed, a batch created...)."""
        if sdk == "openai":
            import openai

            client = openai.AsyncOpenAI(api_key="k", base_url=base_url, timeout=1.0,
                                        max_retries=0)
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
        else:
            import anthropic

            client2 = anthropic.AsyncAnthropic(api_key="k", base_url=base_url, timeout=1.0,
                                               max_retries=0)
            await client2.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        return {}

    flow: uw.Flow[Nothing, Any] = uw.Flow(f"lost_{sdk}", state=Nothing, tools=[post])

    @flow.step
    async def once(ctx: uw.RunContext[Nothing, Any]) -> Any:
        await ctx.call(post, {})
        return ctx.done("sent")

    return flow


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_lost_answer_on_the_sdk_stack_is_an_unknown_outcome(
    db_url: str, server: Silent, sdk: str,
) -> None:
    base = f"http://127.0.0.1:{server.port}" + ("/v1" if sdk == "openai" else "")
    flow = flow_of(sdk, base)
    store = uw.connect(db_url)
    try:
        engine = uw.Engine(store, flows=[flow])
        run_id, _ = engine.start(flow, {})
        asyncio.run(Runner(engine).run_until_idle())
        state = engine.state(run_id)
        events = [r.event for r in engine.journal.history("default", run_id)]
        assert server.received == 1, "the request should have left exactly once"
        assert state.status == "escalated", (state.status, state.error)
        assert any(isinstance(e, ev.ToolOutcomeUnknown | ev.ToolTimedOut) for e in events)
        assert not any(isinstance(e, ev.ToolFailed) for e in events), "recorded as failed"
        assert state.escalation is not None and state.escalation.cause == "unknown_outcome"
    finally:
        store.close()


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_request_refused_before_it_left_is_an_ordinary_failure(db_url: str,
                                                                 sdk: str) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens: the connection is refused
    flow = flow_of(sdk, f"http://127.0.0.1:{port}" + ("/v1" if sdk == "openai" else ""))
    store = uw.connect(db_url)
    try:
        engine = uw.Engine(store, flows=[flow])
        run_id, _ = engine.start(flow, {})
        asyncio.run(Runner(engine).run_until_idle())
        events = [r.event for r in engine.journal.history("default", run_id)]
        assert any(isinstance(e, ev.ToolFailed) for e in events), events
        assert not any(isinstance(e, ev.ToolOutcomeUnknown) for e in events)
    finally:
        store.close()
