"""A server that goes away between calls: a call that never left is an ordinary failure,
not an unknown outcome, and the next call starts (or reaches) the server again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mcp_ledger import Seen, effects, run_to_end, start_http, stdio, stop

import underway as uw
import underway.mcp as uw_mcp
from underway import events as ev


def test_a_stdio_server_that_exited_is_started_again(led: Path) -> None:
    async def main() -> tuple[uw.RunState, list[ev.Event]]:
        toolset = await uw_mcp.Toolset(stdio(led)).load()
        charge, quit_ = toolset.tool("charge"), toolset.tool("quit")
        flow = uw.Flow("after_exit", state=Seen, tools=toolset.tools)

        @flow.step
        async def go(ctx: uw.RunContext[Seen, Any]) -> Any:
            ctx.state.results.append(await ctx.call(quit_, {}))
            conn = toolset._connection
            assert conn is not None
            await conn.wire.ended.wait()  # the server process is gone
            ctx.state.results.append(await ctx.call(charge, {"account": "a", "amount": 2}))
            return ctx.done(ctx.state.results)

        return await run_to_end(flow, toolset)

    state, events = asyncio.run(main())
    assert state.status == "completed"
    assert state.result == [{"result": "bye"}, {"result": "charged 2 to a"}]
    assert not [e for e in events if isinstance(e, ev.ToolOutcomeUnknown)]
    assert [e["tool"] for e in effects(led)] == ["charge"]


def test_a_call_to_an_http_server_that_is_gone_never_left(led: Path) -> None:
    proc, url = start_http(led)

    async def main() -> tuple[uw.RunState, list[ev.Event]]:
        toolset = await uw_mcp.Toolset(uw_mcp.HTTP(url=url, hosts=["127.0.0.1"])).load()
        charge = toolset.tool("charge")
        flow = uw.Flow("server_gone", state=Seen, tools=[charge])

        @flow.step
        async def go(ctx: uw.RunContext[Seen, Any]) -> Any:
            try:
                await ctx.call(charge, {"account": "a", "amount": 2})
            except uw.ToolCallError as exc:
                return ctx.done({"error": exc.error_type, "retryable": exc.retryable})
            return ctx.done({"error": None})

        proc.kill()
        proc.wait()
        return await run_to_end(flow, toolset)

    try:
        state, events = asyncio.run(main())
    finally:
        stop(proc)
    # The connection was refused: nothing was sent, so the outcome is known.
    assert state.result == {"error": "ToolError", "retryable": True}
    assert not [e for e in events if isinstance(e, ev.ToolOutcomeUnknown)]
    (failed,) = [e for e in events if isinstance(e, ev.ToolFailed)]
    assert "could not be sent" in failed.message
