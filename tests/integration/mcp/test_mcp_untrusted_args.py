"""An MCP tool's ``untrusted_args`` come from the toolset's overrides (an annotation never
says which arguments may carry untrusted content). Traced by provenance and decided by the
default policy on SQLite and PostgreSQL: an untrusted value in a declared argument runs,
the same in any other argument is held. A misspelt argument is refused when the tools load."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp_ledger import Seen, effects, stdio

import underway as uw
import underway.mcp as uw_mcp
from underway.errors import ConfigurationError
from underway.guard.policy import DEFAULT_POLICY
from underway.guard.provenance import Corpus, assess

GOAL = "Look the price of tea up and store it under the name tea, then charge acct-1."


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A URL of a fresh, empty database of each kind."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def test_declared_untrusted_args_of_an_mcp_tool_run_and_others_are_held(
        db_url: str, led: Path) -> None:
    async def main() -> uw.RunState:
        toolset = await uw_mcp.Toolset(
            stdio(led), overrides={"put": {"untrusted_args": ["value"]}}).load()
        lookup, put, charge = (toolset.tool(n) for n in ("lookup", "put", "charge"))
        assert put.untrusted_args == ("value",) and charge.untrusted_args == ()
        flow = uw.Flow("mcp_provenance", state=Seen, tools=toolset.tools, policy=DEFAULT_POLICY)

        @flow.step
        async def use(ctx: uw.RunContext[Seen, Any]) -> Any:
            # As an agent would: the lookup's output is untrusted, the goal trusted.
            looked = await ctx.call(lookup, {"item": "tea"})
            corpus, blocks = Corpus(), [("lookup", json.dumps(looked).lower())]
            corpus.add_text(GOAL)
            for tool, args in ((put, {"name": "tea", "value": json.dumps(looked)}),
                               (charge, {"account": "acct-1", "amount": looked["price"]})):
                found = assess(tool, args, corpus, taint=["lookup"],
                               requested=["put", "charge"], blocks=blocks)
                ctx.state.results.append(await ctx.call(
                    tool, args, labels=list(found.labels), evidence=found.evidence()))
            return ctx.done(ctx.state.results)

        engine = uw.Engine(uw.connect(db_url), flows=[flow])
        try:
            run_id, _ = engine.start(flow)
            await uw.Runner(engine).run_until_idle()
            return engine.state(run_id)
        finally:
            await toolset.aclose()

    state = asyncio.run(main())
    # The stored value repeats the lookup's output and may; the amount comes from it too,
    # and may not: the charge waits for a person.
    assert state.status == "waiting"
    asked = state.pending_approval
    assert asked is not None and asked.tool == "charge" and asked.rule_id == "untrusted-argument"
    assert [t["arg"] for t in asked.evidence["held_by"]] == ["amount"]
    assert asked.evidence["held_by"][0]["sources"] == ["lookup"]
    assert [e["tool"] for e in effects(led)] == ["put"]


def test_an_untrusted_arg_the_tool_does_not_take_is_refused_when_it_loads(led: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"untrusted_args names \['text'\]"):
        uw_mcp.Toolset(stdio(led), overrides={"put": {"untrusted_args": ["text"]}}).load_sync()
    with pytest.raises(ConfigurationError, match="not the string"):
        uw_mcp.Toolset(stdio(led), overrides={"put": {"untrusted_args": "value"}}).load_sync()
