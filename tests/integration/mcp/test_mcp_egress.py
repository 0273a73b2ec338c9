"""What an MCP server may reach: a stdio server inside the sandbox reaches only the hosts
its profile lists, and an HTTP server is reached only at a host its allow-list names."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_ledger import Seen, effects, run_to_end, start_http, stdio, stop

import underway as uw
import underway.mcp as uw_mcp
from fakes.host_site import HostSite
from underway import events as ev
from underway.errors import EgressDenied
from underway.sandbox import SandboxProfile, SandboxUnavailable


@pytest.fixture
def site() -> Iterator[HostSite]:
    """A local web site on a free port of the host."""
    with HostSite() as served:
        yield served


def test_a_sandboxed_server_reaches_only_the_hosts_its_profile_lists(led: Path,
                                                                     site: HostSite) -> None:
    async def main() -> tuple[uw.RunState, list[ev.Event]]:
        toolset = await uw_mcp.Toolset(stdio(led, hosts=("127.0.0.1",))).load()
        fetch = toolset.tool("fetch")
        flow = uw.Flow("fetches", state=Seen, tools=[fetch])

        @flow.step
        async def go(ctx: uw.RunContext[Seen, Any]) -> Any:
            for url in (f"http://127.0.0.1:{site.port}/", f"http://localhost:{site.port}/"):
                try:
                    ctx.state.results.append(await ctx.call(fetch, {"url": url}))
                except uw.ToolCallError as exc:
                    ctx.state.errors.append(f"{exc.error_type}: {exc.message}")
            return ctx.done({"results": ctx.state.results, "errors": ctx.state.errors})

        return await run_to_end(flow, toolset)

    state, events = asyncio.run(main())
    assert state.result["results"] == [{"result": "200 hello from the host"}]
    (refused,) = state.result["errors"]
    assert refused.startswith("ToolError: MCP server ledger, tool 'fetch': ")
    assert "403" in refused, "the sandbox's proxy refused a host the profile does not list"
    failed = [e for e in events if isinstance(e, ev.ToolFailed)]
    assert [(e.tool, e.error_type) for e in failed] == [("fetch", "ToolError")]
    assert site.paths == ["/"], "the refused host was never reached"


def test_a_sandboxed_server_without_hosts_has_no_network(led: Path, site: HostSite) -> None:
    async def main() -> str:
        toolset = await uw_mcp.Toolset(stdio(led)).load()
        try:
            client = await toolset._connect()
            result = await client.call_tool("fetch", {"url": f"http://127.0.0.1:{site.port}/"})
            assert result.is_error
            return str(result.content[0].text)  # type: ignore[union-attr]
        finally:
            await toolset.aclose()

    said = asyncio.run(main())
    assert "fetch failed" in said and "Connection refused" in said
    assert site.paths == []


def test_an_http_server_off_the_allow_list_is_refused(led: Path) -> None:
    proc, url = start_http(led)
    try:
        allowed = uw_mcp.HTTP(url=url, hosts=("127.0.0.1",), name="ledger")
        elsewhere = uw_mcp.HTTP(url=url, hosts=("tools.example.com",), name="ledger")

        with pytest.raises(EgressDenied, match=r"tools\.example\.com; refused http://127\.0\.0\.1"):
            uw_mcp.Toolset(elsewhere).load_sync()

        async def main() -> tuple[uw.RunState, list[ev.Event]]:
            # Tools read where the server was allowed, then called where it is not: every
            # call is refused before anything is sent, and the refusal is journaled.
            listed = await uw_mcp.Toolset(allowed).load()
            toolset = uw_mcp.Toolset(elsewhere)
            toolset._absorb([listed._listed["charge"]])
            await listed.aclose()
            charge = toolset.tool("charge")
            flow = uw.Flow("charges", state=Seen, tools=[charge])

            @flow.step
            async def go(ctx: uw.RunContext[Seen, Any]) -> Any:
                try:
                    await ctx.call(charge, {"account": "acme", "amount": 5})
                except uw.ToolCallError as exc:
                    return ctx.done({"error": exc.error_type})
                return ctx.done({"error": None})

            return await run_to_end(flow)

        state, events = asyncio.run(main())
    finally:
        stop(proc)
    assert state.result == {"error": "EgressDenied"}
    (refused,) = [e for e in events if isinstance(e, ev.ToolRefused)]
    assert (refused.tool, refused.cause) == ("charge", "egress_denied")
    assert "tools.example.com" in refused.reason
    assert effects(led) == []


def test_a_stdio_server_never_runs_unsandboxed(led: Path) -> None:
    server = stdio(led)
    loose = uw_mcp.Stdio(command=server.command, env=server.env, name="ledger",
                         profile=SandboxProfile(backend="none", allow_unsandboxed=True))
    with pytest.raises(SandboxUnavailable, match="must run isolated"):
        uw_mcp.Toolset(loose).load_sync()
