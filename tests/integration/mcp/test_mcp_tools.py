"""Tools of a real MCP server (tests/integration/mcp/server.py, made with the official SDK)
called from flows and an agent, over stdio inside the sandbox and over Streamable HTTP:
the schema the guard checks, the flags the annotations set, the journal, and a changed
tool list."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp_ledger import Seen, effects, run_to_end

import underway as uw
import underway.mcp as uw_mcp
from underway import events as ev
from underway.errors import ConfigurationError
from underway.testing import RuleModel, memory_engine, say

Step = Callable[[uw.RunContext[Seen, Any], uw_mcp.Toolset], Awaitable[None]]


def run(server: uw_mcp.Server, body: Step, **options: Any
        ) -> tuple[uw.RunState, list[ev.Event], uw_mcp.Toolset]:
    """Load the server's tools, run a flow whose one step is ``body``, and return the run's
    end, its journal and the toolset."""

    async def main() -> tuple[uw.RunState, list[ev.Event], uw_mcp.Toolset]:
        toolset = await uw_mcp.Toolset(server, **options).load()
        flow = uw.Flow("uses_mcp", state=Seen, tools=[*toolset.tools, "ping"])

        @flow.step
        async def use(ctx: uw.RunContext[Seen, Any]) -> Any:
            await body(ctx, toolset)
            return ctx.done({"results": ctx.state.results, "errors": ctx.state.errors})

        state, events = await run_to_end(flow, toolset)
        return state, events, toolset

    return asyncio.run(main())


async def call(ctx: uw.RunContext[Seen, Any], tool: uw.Tool, args: Any) -> None:
    try:
        ctx.state.results.append(await ctx.call(tool, args))
    except uw.ToolCallError as exc:
        ctx.state.errors.append(f"{exc.error_type}: {exc.message}")


def test_annotations_set_the_flags_and_the_schema_is_the_servers(server: uw_mcp.Server) -> None:
    async def nothing(ctx: uw.RunContext[Seen, Any], toolset: uw_mcp.Toolset) -> None:
        return None

    _, _, toolset = run(server, nothing, prefix="ledger_")
    by_name = {t.name: t for t in toolset.tools}
    assert sorted(by_name) == ["ledger_charge", "ledger_fetch", "ledger_hold",
                               "ledger_hold_put", "ledger_lookup", "ledger_peek",
                               "ledger_put", "ledger_quit", "ledger_reshape"]
    lookup, charge, put = (toolset.tool(n) for n in ("lookup", "charge", "put"))
    # readOnlyHint, openWorldHint false: read-only, not outbound, and its output still
    # untrusted: a server cannot vouch for itself.
    assert (lookup.mutating, lookup.trusted_output, lookup.outbound) == (False, False, False)
    # No annotation at all: mutating, irreversible (destructive by default), untrusted.
    assert (charge.mutating, charge.irreversible, charge.idempotent,
            charge.trusted_output) == (True, True, False, False)
    # idempotentHint (destructiveHint unsaid): idempotent, so not irreversible.
    assert (put.mutating, put.idempotent, put.irreversible) == (True, True, False)
    # A read-only tool of the open world: untrusted and outbound.
    fetch = toolset.tool("fetch")
    assert (fetch.mutating, fetch.trusted_output, fetch.outbound) == (False, False, True)
    spec = charge.spec()
    assert spec["name"] == "ledger_charge"
    assert spec["parameters"]["required"] == ["account", "amount"]  # type: ignore[index]
    assert spec["parameters"]["properties"]["amount"]["type"] == "integer"  # type: ignore[index]


def test_a_servers_credentials_stay_out_of_its_repr() -> None:
    shown = repr(uw_mcp.HTTP(url="https://crm.example.com/mcp", hosts=["crm.example.com"],
                             headers={"Authorization": "Bearer s3cret"}))
    assert "s3cret" not in shown and "crm.example.com" in shown


def test_overrides_win_over_the_annotations(server: uw_mcp.Server) -> None:
    async def nothing(ctx: uw.RunContext[Seen, Any], toolset: uw_mcp.Toolset) -> None:
        return None

    _, _, toolset = run(server, nothing, overrides={
        "charge": {"idempotent": True, "timeout": 5.0, "amount": "amount", "currency": "INR"},
        "lookup": {"trusted_output": False},
    })
    charge, lookup = toolset.tool("charge"), toolset.tool("lookup")
    assert (charge.idempotent, charge.irreversible, charge.timeout) == (True, False, 5.0)
    assert charge.money({"account": "a", "amount": 30}) is not None
    assert not lookup.trusted_output


def test_calls_are_journaled_through_the_guard(server: uw_mcp.Server, led: Path) -> None:
    async def body(ctx: uw.RunContext[Seen, Any], toolset: uw_mcp.Toolset) -> None:
        await call(ctx, toolset.tool("lookup"), {"item": "tea"})
        await call(ctx, toolset.tool("charge"), {"account": "acme", "amount": 40})
        await call(ctx, toolset.tool("charge"), {"account": "acme", "amount": "forty"})
        await call(ctx, toolset.tool("charge"), {"account": "acme"})

    state, events, _ = run(server, body)
    assert state.status == "completed"
    assert state.result["results"] == [{"item": "tea", "price": 30},
                                      {"result": "charged 40 to acme"}]
    assert [e.split(":")[0] for e in state.result["errors"]] == [
        "SchemaValidationFailed", "SchemaValidationFailed"]
    assert "amount: 'forty' is not of type 'integer'" in state.result["errors"][0]
    assert "'amount' is a required property" in state.result["errors"][1]
    started = [e for e in events if isinstance(e, ev.ToolStarted)]
    assert [e.tool for e in started] == ["charge"], "read-only lookup writes no intent"
    # A sandboxed server's profile is journaled with the intent, as a shell tool's is.
    profile = server.profile.digest() if isinstance(server, uw_mcp.Stdio) else None
    assert started[0].sandbox_profile == profile
    succeeded = [e for e in events if isinstance(e, ev.ToolSucceeded)]
    assert [e.tool for e in succeeded] == ["lookup", "charge"]
    refused = [e for e in events if isinstance(e, ev.SchemaValidationFailed)]
    assert [e.tool for e in refused] == ["charge", "charge"]
    # The invalid calls never reached the server; the valid one carried its key.
    assert effects(led) == [{"tool": "charge", "key": started[0].key, "account": "acme",
                             "amount": 40}]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_changed_tool_list_retires_and_adds_tools(server: uw_mcp.Server, led: Path,
                                                   mode: str) -> None:
    """Heard through a subscription (a 2026 connection) or a notification (the 2025
    handshake)."""

    async def body(ctx: uw.RunContext[Seen, Any], toolset: uw_mcp.Toolset) -> None:
        before = toolset.generation
        await call(ctx, toolset.tool("reshape"), {})
        await toolset.changed(before)
        await call(ctx, toolset.tool("charge"), {"account": "acme", "amount": 1})
        await call(ctx, toolset.tool("ping"), {})

    state, events, toolset = run(server, body, mode=mode)
    assert state.result["results"] == [{"result": "reshaped"}, {"result": "pong"}]
    (error,) = state.result["errors"]
    assert error.startswith("ToolVanished: MCP server ledger no longer lists tool 'charge'")
    assert not toolset.listed("charge") and toolset.listed("ping")
    assert "ping" in [t.name for t in toolset.tools]
    assert "charge" not in [t.name for t in toolset.tools]
    failed = [e for e in events if isinstance(e, ev.ToolFailed)]
    assert [(e.tool, e.error_type, e.retryable) for e in failed] == [
        ("charge", "ToolVanished", False)]
    assert effects(led) == [], "the vanished tool was never sent"


def _buy_coffee(server: uw_mcp.Server, overrides: dict[str, Any]
                ) -> tuple[uw.RunState, list[ev.Event]]:
    def decide(req: Any) -> Any:
        seen = [m for m in req.messages if m.role == "tool"]
        if not seen:
            return say(None, ("lookup", {"item": "coffee"}))
        if len(seen) == 1:
            return say(None, ("charge", {"account": "acme", "amount": 60}))
        return say("Done.", ("finish", {"result": "charged acme for coffee"}))

    async def main() -> tuple[uw.RunState, list[ev.Event]]:
        toolset = await uw_mcp.Toolset(server, include=["lookup", "charge"],
                                       overrides=overrides).load()
        agent = uw.Agent("buyer", model=RuleModel(decide), tools=toolset.tools,
                         plan=False)
        engine, _ = memory_engine([agent.flow])
        try:
            run_id, _ = engine.start(agent.flow, {"goal": "buy coffee for acme"})
            runner = uw.Runner(engine)
            await runner.run_until_idle()
            state = engine.state(run_id)
            return state, [r.event for r in engine.journal.history("default", run_id)]
        finally:
            await toolset.aclose()

    return asyncio.run(main())


def test_an_agent_calls_mcp_tools_through_the_guard(server: uw_mcp.Server, led: Path) -> None:
    # The user vouches for the lookup's output; the server's closed-world hint alone does not.
    state, events = _buy_coffee(server, {"lookup": {"trusted_output": True}})
    assert state.status == "completed"
    assert [e.tool for e in events if isinstance(e, ev.ToolSucceeded)] == ["lookup", "charge"]
    assert [e.tool for e in events if isinstance(e, ev.PolicyDecided)] == ["lookup", "charge"]
    (charged,) = effects(led)
    assert (charged["tool"], charged["amount"]) == ("charge", 60)


def test_a_servers_own_output_holds_the_agents_next_write(server: uw_mcp.Server,
                                                         led: Path) -> None:
    # lookup says openWorldHint false, yet nobody vouched for it: the charge proposed after
    # reading it waits for a person, and nothing is charged.
    state, events = _buy_coffee(server, {})
    assert state.status == "waiting"
    assert [e.tool for e in events if isinstance(e, ev.ToolSucceeded)] == ["lookup"]
    assert effects(led) == []


def test_a_name_the_server_does_not_list_is_refused_at_load(server: uw_mcp.Server) -> None:
    with pytest.raises(ConfigurationError, match=r"lists no tool \['chrage'\]"):
        uw_mcp.Toolset(server, overrides={"chrage": {"idempotent": True}}).load_sync()
