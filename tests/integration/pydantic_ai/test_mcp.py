"""An MCP server used as a pydantic-ai toolset: its tools are underway tools, their flags set
by the rules of underway.mcp. The read-only annotation makes a tool read-only; a tool
without annotations is mutating, irreversible, journaled before it runs, and its output
untrusted; the user's options win."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import underway as uw
from underway import events as ev
from underway.integrations.pydantic_ai import DurableAgent

SERVER = Path(__file__).with_name("mcp_orders.py")


def brain(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not done:
        return ModelResponse(parts=[ToolCallPart("order_status", {"order": "A1"})])
    if len(done) == 1:
        return ModelResponse(parts=[ToolCallPart("refund", {"order": "A1", "amount": 300})])
    return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in done))])


def agent_with_mcp(ledger: Path) -> Agent[None, str]:
    transport = StdioTransport(sys.executable, [str(SERVER)],
                               env={"ORDERS_LEDGER": str(ledger)})
    return Agent(FunctionModel(brain), toolsets=[MCPToolset(transport, id="orders")])


def journal(engine: uw.Engine, run_id: str, kind: type[Any]) -> list[Any]:
    return [e.event for e in engine.client.events(run_id) if isinstance(e.event, kind)]


def test_mcp_tools_are_guarded_underway_tools_with_flags_from_their_annotations(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.txt"
    durable = DurableAgent(agent_with_mcp(ledger), name="mcp-orders",
                           # The refund follows the lookup's output, untrusted: the
                           # default policy would hold it; this policy lets it run.
                           policy=uw.Policy("open-1", []))
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    asyncio.run(uw.Runner(engine).run_until_idle())

    state = engine.state(run_id)
    assert state.status == "completed", state
    assert state.result == "A1 is delivered, damaged | refunded 300 for A1"
    assert ledger.read_text() == "A1 300\n"
    # readOnlyHint: no intent before the lookup; no annotation: the refund's is journaled.
    assert [e.tool for e in journal(engine, run_id, ev.ToolStarted)] == ["refund"]
    assert [e.tool for e in journal(engine, run_id, ev.ToolSucceeded)] == [
        "order_status", "refund"]
    assert [t.mutating for t in (durable.tools.made["order_status"],
                                 durable.tools.made["refund"])] == [False, True]
    assert durable.tools.made["refund"].trusted_output is False
    # The flags are underway.mcp's: a closed world is not outbound; no annotation at all is
    # the worst case, irreversible too.
    assert durable.tools.made["order_status"].outbound is False
    assert durable.tools.made["refund"].irreversible is True


def test_the_user_s_options_win_over_the_annotations_by_the_same_rules(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    durable = DurableAgent(agent_with_mcp(ledger), name="mcp-idempotent",
                           policy=uw.Policy("open-1", []), tools={"refund": {"idempotent": True}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    asyncio.run(uw.Runner(engine).run_until_idle())

    assert engine.state(run_id).status == "completed"
    refund = durable.tools.made["refund"]
    # Idempotent, so no longer irreversible (a tool cannot be both), and still mutating.
    assert (refund.idempotent, refund.irreversible, refund.mutating) == (True, False, True)
    assert ledger.read_text() == "A1 300\n"


def test_the_default_policy_holds_a_refund_proposed_after_untrusted_mcp_output(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.txt"
    durable = DurableAgent(agent_with_mcp(ledger), name="mcp-held")
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "refund A1"})
    asyncio.run(uw.Runner(engine).run_until_idle())

    state = engine.state(run_id)
    assert state.status == "waiting"
    assert state.pending_approval is not None and state.pending_approval.tool == "refund"
    assert not ledger.exists()

