"""An OpenAI Agents SDK agent run durably: its model is the SDK's own OpenAI model, against a
local server speaking the Chat Completions or Responses wire format; its tool calls go
through underway's guard."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import agents
import httpx2
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    OpenAIResponsesModel,
    RunConfig,
    RunContextWrapper,
    WebSearchTool,
    function_tool,
)
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import Approver, drive, of_type
from fakes.model_provider import (
    FakeProvider,
    Reply,
    openai_completion,
    openai_error,
    openai_response,
    openai_stream,
    response_call,
    response_text,
)
from underway import events as ev
from underway.errors import ConfigurationError
from underway.guard.budgets import Budget
from underway.guard.policy import Policy, Rule
from underway.integrations.openai_agents import (
    AgentsModel,
    DurableAgent,
    current_call,
    decode_response,
    encode_request,
)
from underway.ops.deploy import check_deploy
from underway.ops.replay import replay_run
from underway.testing import memory_engine

agents.set_tracing_disabled(True)

PAID: list[dict[str, Any]] = []
KEYS: list[str] = []


@function_tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"31C in {city}"


@function_tool(needs_approval=True)
def pay(account: str, amount: int) -> str:
    """Pay an amount to an account."""
    PAID.append({"account": account, "amount": amount})
    KEYS.append(current_call().key)
    return "paid"


@pytest.fixture(autouse=True)
def _clean() -> None:
    PAID.clear()
    KEYS.clear()


def client(server: FakeProvider) -> AsyncOpenAI:
    """A client of the local server that keeps no connection open between requests: each
    ``drive`` runs its own event loop, and a pooled connection would outlive it."""
    return AsyncOpenAI(
        base_url=f"{server.origin}/v1", api_key="unused", max_retries=0,
        http_client=DefaultAsyncHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0)))


def chat(server: FakeProvider) -> OpenAIChatCompletionsModel:
    return OpenAIChatCompletionsModel("gpt-4o-mini", client(server))


def calls(*calls: tuple[str, str, dict[str, Any]]) -> Reply:
    return openai_completion(tool_calls=[(i, n, json.dumps(a)) for i, n, a in calls],
                             finish_reason="tool_calls")


def tool_messages(server: FakeProvider, request: int) -> list[str]:
    return [m["content"] for m in server.received[request].body["messages"]
            if m["role"] == "tool"]


def test_a_tool_call_is_journaled_guarded_and_the_result_is_the_final_output() -> None:
    with FakeProvider(calls(("c1", "lookup", {"city": "Pune"})),
                      openai_completion(content="It is 31C in Pune.")) as server:
        agent = Agent("weather", instructions="Be brief.", tools=[lookup], model=chat(server))
        durable = DurableAgent(agent, tools={"lookup": {"read_only": True}})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Weather in Pune?"})
        s = drive(engine, run_id)
        assert tool_messages(server, 1) == ["31C in Pune"]
        assert len(server.received) == 2
    assert s.status == "completed" and s.result == "It is 31C in Pune."
    [first, second] = of_type(engine, run_id, ev.ModelResponded)
    assert first.model == "gpt-4o-mini" and (first.tokens_in, first.tokens_out) == (12, 5)
    assert first.request["tools"][0]["name"] == "lookup"
    [decided] = of_type(engine, run_id, ev.PolicyDecided)
    [done] = of_type(engine, run_id, ev.ToolSucceeded)
    assert decided.tool == done.tool == "lookup" and done.result == "31C in Pune"
    assert (first.index, done.index, second.index) == (0, 1, 2)


def test_the_responses_api_model_and_a_structured_output() -> None:
    class Forecast(BaseModel):
        city: str
        celsius: int

    with FakeProvider(
        openai_response(response_call("c1", "lookup", '{"city": "Pune"}')),
        openai_response(response_text('{"city": "Pune", "celsius": 31}')),
    ) as server:
        agent = Agent("forecaster", tools=[lookup], output_type=Forecast,
                      model=OpenAIResponsesModel("gpt-4o-mini", client(server)))
        durable = DurableAgent(agent, tools={"lookup": {"read_only": True}})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Weather in Pune?"})
        s = drive(engine, run_id)
        assert [r.path for r in server.received] == ["/v1/responses"] * 2
        sent = server.received[1].body["input"]
        assert {"type": "function_call_output", "call_id": "c1",
                "output": "31C in Pune"}.items() <= sent[-1].items()
    assert s.status == "completed" and s.result == {"city": "Pune", "celsius": 31}
    [first, _] = of_type(engine, run_id, ev.ModelResponded)
    assert first.request["output_schema"]["name"] == "Forecast"


def test_a_denied_tool_never_runs_and_the_model_is_told() -> None:
    deny = Policy("no-pay", [Rule("never-pay", outcome="deny", tools=["pay"],
                                  reason="payments are off")])
    with FakeProvider(calls(("c1", "pay", {"account": "ACC-1", "amount": 5})),
                      openai_completion(content="I could not pay.")) as server:
        agent = Agent("payer", tools=[pay], model=chat(server))
        durable = DurableAgent(agent, policy=deny)
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Pay ACC-1 5"})
        s = drive(engine, run_id)
        [told] = tool_messages(server, 1)
    assert s.status == "completed" and PAID == []
    assert "PolicyDenied" in told and "payments are off" in told
    [refused] = of_type(engine, run_id, ev.ToolRefused)
    assert refused.cause == "policy_denied" and refused.tool == "pay"


def test_arguments_that_break_the_schema_are_refused_and_journaled() -> None:
    with FakeProvider(calls(("c1", "lookup", {"town": "Pune"})),
                      openai_completion(content="Sorry.")) as server:
        agent = Agent("weather2", tools=[lookup], model=chat(server))
        engine, _ = memory_engine([DurableAgent(agent).flow])
        run_id, _ = engine.start("weather2", {"input": "Weather?"})
        s = drive(engine, run_id)
        [told] = tool_messages(server, 1)
    assert s.status == "completed"
    assert "SchemaValidationFailed" in told and "'city' is a required property" in told
    [failed] = of_type(engine, run_id, ev.SchemaValidationFailed)
    assert failed.tool == "lookup" and failed.where == "args"
    assert of_type(engine, run_id, ev.ToolStarted) == []


def test_a_budget_refuses_a_call_before_it_runs() -> None:
    with FakeProvider(calls(("c1", "lookup", {"city": "Pune"}))) as server:
        agent = Agent("weather3", tools=[lookup], model=chat(server))
        durable = DurableAgent(agent, budget=Budget(tool_calls=0))
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Weather?"})
        s = drive(engine, run_id)
        assert len(server.received) == 1
    assert s.status == "escalated"
    [over] = of_type(engine, run_id, ev.BudgetExceeded)
    assert over.metric == "tool_calls" and over.tool == "lookup"
    assert of_type(engine, run_id, ev.ToolSucceeded) == []


def test_a_token_budget_counts_model_calls_and_needs_max_tokens() -> None:
    with FakeProvider(openai_completion(content="Hi")) as server:
        agent = Agent("greeter", model=chat(server))
        durable = DurableAgent(agent, budget=Budget(tokens=10_000))
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Hello"})
        s = drive(engine, run_id)
        assert server.received == []  # refused before it was sent: no bound on its output
    assert s.status == "escalated"
    assert "max_tokens" in (of_type(engine, run_id, ev.BudgetExceeded)[0].reason or "")
    with FakeProvider(openai_completion(content="Hi")) as server:
        bounded = Agent("greeter2", model=chat(server),
                        model_settings=ModelSettings(max_tokens=50))
        durable = DurableAgent(bounded, budget=Budget(tokens=10_000))
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Hello"})
        s = drive(engine, run_id)
    assert s.status == "completed" and s.result == "Hi"
    assert (s.model_calls, s.tokens_in + s.tokens_out) == (1, 17)


def test_needs_approval_waits_for_a_signed_decision_then_runs_once(tmp_path: Path) -> None:
    with FakeProvider(calls(("c1", "pay", {"account": "ACC-1", "amount": 5})),
                      openai_completion(content="Paid.")) as server:
        agent = Agent("payer2", tools=[pay], model=chat(server))
        durable = DurableAgent(agent)
        engine, _ = memory_engine([durable.flow])
        boss = Approver(engine, tmp_path, "boss", ("finance",))
        run_id, _ = engine.start(durable.flow, {"input": "Pay ACC-1 5"})
        s = drive(engine, run_id)
        assert s.status == "waiting" and s.pending_approval is not None
        assert s.pending_approval.tool == "pay" and PAID == []
        assert len(server.received) == 1
        engine.submit_decision(boss.decide(s))
        s = drive(engine, run_id)
        # The step ran again: the first answer came from the journal, not the server.
        assert len(server.received) == 2
    assert s.status == "completed" and s.result == "Paid."
    assert PAID == [{"account": "ACC-1", "amount": 5}]
    [requested] = of_type(engine, run_id, ev.ApprovalRequested)
    assert requested.rule_id == "tool-requires-approval"
    assert [requested.key] == KEYS


def test_a_rejected_approval_is_told_to_the_model(tmp_path: Path) -> None:
    with FakeProvider(calls(("c1", "pay", {"account": "ACC-1", "amount": 5})),
                      openai_completion(content="Not paid.")) as server:
        agent = Agent("payer3", tools=[pay], model=chat(server))
        engine, _ = memory_engine([DurableAgent(agent).flow])
        boss = Approver(engine, tmp_path, "boss", ("finance",))
        run_id, _ = engine.start("payer3", {"input": "Pay ACC-1 5"})
        engine.submit_decision(boss.decide(drive(engine, run_id), "reject"))
        s = drive(engine, run_id)
        [told] = tool_messages(server, 1)
    assert s.status == "completed" and PAID == []
    assert "ApprovalRejected" in told


def test_a_callable_needs_approval_holds_only_the_calls_it_names() -> None:
    async def big(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
        return bool(params["amount"] > 100)

    @function_tool(needs_approval=big)
    def transfer(account: str, amount: int) -> str:
        """Transfer money."""
        PAID.append({"account": account, "amount": amount})
        return "sent"

    with FakeProvider(calls(("c1", "transfer", {"account": "A", "amount": 5})),
                      calls(("c2", "transfer", {"account": "B", "amount": 500})),
                      openai_completion(content="done")) as server:
        agent = Agent("mover", tools=[transfer], model=chat(server))
        durable = DurableAgent(agent, tools={"transfer": {"trusted_output": True}})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "move"})
        s = drive(engine, run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    assert PAID == [{"account": "A", "amount": 5}]
    assert json.loads(json.dumps(s.pending_approval.args)) == {"account": "B", "amount": 500}


def test_untrusted_tool_output_holds_the_next_mutating_call() -> None:
    @function_tool
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    with FakeProvider(calls(("c1", "lookup", {"city": "Pune"})),
                      calls(("c2", "note", {"text": "31C"}))) as server:
        agent = Agent("noter", tools=[lookup, note], model=chat(server))
        durable = DurableAgent(agent, tools={"lookup": {"read_only": True}})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "note the weather"})
        s = drive(engine, run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    assert s.pending_approval.tool == "note"
    # "31C" comes from the lookup's output, not from the user: its text holds the call.
    assert s.pending_approval.rule_id == "untrusted-argument"
    [held_by] = s.pending_approval.evidence["held_by"]
    assert (held_by["arg"], held_by["sources"], held_by["repeats"]) == ("text", ["lookup"], True)


def test_a_handoff_target_with_its_own_model_is_durable_too() -> None:
    with FakeProvider(calls(("h1", "transfer_to_billing", {})),
                      openai_completion(content="Billing here.")) as server:
        billing = Agent("billing", model=chat(server))
        triage = Agent("triage", handoffs=[billing], model=chat(server))
        durable = DurableAgent(triage)
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "my bill"})
        s = drive(engine, run_id)
    assert s.status == "completed" and s.result == "Billing here."
    assert len(of_type(engine, run_id, ev.ModelResponded)) == 2


def test_what_cannot_be_made_durable_is_refused_when_wrapped() -> None:
    inner = Agent("inner")
    with pytest.raises(ConfigurationError, match="agent used as a tool"):
        DurableAgent(Agent("outer", tools=[inner.as_tool("ask_inner", "Ask.")]))
    with pytest.raises(ConfigurationError, match="does not have"):
        DurableAgent(Agent("a", tools=[lookup]), tools={"nope": {}})
    with pytest.raises(ConfigurationError, match="inside its underway step"):
        asyncio.run(DurableAgent(Agent("b", tools=[lookup])).agent.tools[0].on_invoke_tool(
            None, "{}"))  # type: ignore[arg-type, union-attr]
    broken = dataclasses.replace(lookup, params_json_schema={"type": "object",
                                                             "properties": 3})
    with pytest.raises(ConfigurationError, match="tool 'lookup' has an invalid input schema"):
        DurableAgent(Agent("c", tools=[broken]))


def test_importing_without_the_sdk_names_the_extra() -> None:
    code = ("import sys; sys.modules['agents'] = None\n"
            "try:\n import underway.integrations.openai_agents\n"
            "except Exception as e: print(type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("MissingExtra")  # a ConfigurationError
    assert "pip install 'underway[openai-agents]'" in out


def test_the_flow_registers_with_a_real_engine_by_name(sqlite_url: str) -> None:
    with FakeProvider(openai_completion(content="Hi")) as server:
        durable = DurableAgent(Agent("Front Desk", model=chat(server)))
        assert durable.flow.name == "Front_Desk"
        engine = uw.Engine(uw.connect(sqlite_url), flows=[durable.flow])
        run_id, _ = engine.start("Front_Desk", {"input": "Hello"})
        s = drive(engine, run_id)
    assert s.status == "completed" and s.result == "Hi"


def test_streamed_model_calls_reach_the_live_stream_and_are_journaled_once() -> None:
    with FakeProvider(
        openai_stream(tool_calls=[("c1", "lookup", ['{"city": ', '"Pune"}'])]),
        openai_stream("It is ", "31C ", "in Pune."),
    ) as server:
        agent = Agent("streamer", tools=[lookup], model=chat(server))
        durable = DurableAgent(agent, tools={"lookup": {"read_only": True}}, stream=True)
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Weather in Pune?"})
        s = drive(engine, run_id)
        assert all(r.body.get("stream") is True for r in server.received)
    assert s.status == "completed" and s.result == "It is 31C in Pune."
    # The live stream keeps the deltas of the run's latest call.
    client = uw.Client(engine.store)
    deltas = [d.delta for d in client.read_stream(run_id)]
    assert deltas == [{"type": "text", "text": "It is "}, {"type": "text", "text": "31C "},
                      {"type": "text", "text": "in Pune."}, {"type": "done"}]
    responded = of_type(engine, run_id, ev.ModelResponded)
    assert len(responded) == 2 and responded[1].tokens_out == 5
    # Driven again, a finished run streams nothing more.
    drive(engine, run_id)
    assert len(client.read_stream(run_id)) == len(deltas)


def test_the_adapter_streams_tool_call_deltas_and_replies_as_complete_does() -> None:
    request = encode_request(
        system_instructions="Be brief.", input="Weather in Pune?",
        model_settings=ModelSettings(), tools=[lookup], output_schema=None, handoffs=[],
        previous_response_id=None, conversation_id=None, prompt=None)
    got: list[Any] = []

    async def emit(delta: Any) -> None:
        got.append(delta)

    with FakeProvider(openai_stream(tool_calls=[("c1", "lookup", ['{"city": ', '"Pune"}'])]),
                      calls(("c1", "lookup", {"city": "Pune"}))) as server:
        model = AgentsModel(chat(server))
        streamed = asyncio.run(model.stream(request, emit))
        completed = asyncio.run(model.complete(request))
    assert got == [
        {"type": "tool_call", "index": 0, "id": "c1", "name": "lookup", "arguments": p}
        for p in ('{"city": ', '"Pune"}')]
    assert decode_response(streamed.response).output[0].arguments == '{"city": "Pune"}'
    assert decode_response(completed.response).output[0].arguments == '{"city": "Pune"}'
    assert (streamed.model, streamed.tokens_in, streamed.tokens_out) == ("gpt-4o-mini", 12, 5)


def test_a_provider_outage_is_retried_on_a_durable_timer_and_a_bad_request_fails() -> None:
    with FakeProvider(openai_error(503, "overloaded"),
                      openai_completion(content="Hi")) as server:
        durable = DurableAgent(Agent("patient", model=chat(server)))
        engine, clock = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Hello"})
        s = drive(engine, run_id)
        assert s.status == "waiting" and len(server.received) == 1
        [retry] = of_type(engine, run_id, ev.RetryScheduled)
        assert retry.tool == "model"
        clock.advance(retry.delay_s + 1)
        s = drive(engine, run_id)
    assert s.status == "completed" and s.result == "Hi"
    with FakeProvider(openai_error(400, "no such model")) as server:
        durable = DurableAgent(Agent("wrong", model=chat(server)))
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Hello"})
        s = drive(engine, run_id)
    assert s.status == "failed" and "no such model" in (s.error or "")


def test_the_tool_calls_of_one_turn_run_in_order_and_none_twice(tmp_path: Path) -> None:
    looked: list[str] = []

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        looked.append(city)
        return f"31C in {city}"

    with FakeProvider(calls(("c1", "weather", {"city": "Pune"}),
                            ("c2", "pay", {"account": "ACC-1", "amount": 5}),
                            ("c3", "weather", {"city": "Goa"})),
                      openai_completion(content="Done.")) as server:
        agent = Agent("busy", tools=[weather, pay], model=chat(server))
        durable = DurableAgent(agent, tools={"weather": {"read_only": True,
                                                         "trusted_output": True}})
        engine, _ = memory_engine([durable.flow])
        boss = Approver(engine, tmp_path, "boss", ("finance",))
        run_id, _ = engine.start(durable.flow, {"input": "weather, then pay"})
        s = drive(engine, run_id)
        # The first call ran; the second waits for a person; the third has not started.
        assert s.status == "waiting" and looked == ["Pune"] and PAID == []
        engine.submit_decision(boss.decide(s))
        s = drive(engine, run_id)
        assert len(server.received) == 2
    assert s.status == "completed" and looked == ["Pune", "Goa"]
    assert PAID == [{"account": "ACC-1", "amount": 5}]
    done = of_type(engine, run_id, ev.ToolSucceeded)
    assert [(e.tool, e.index) for e in done] == [("weather", 1), ("pay", 2), ("weather", 3)]


def test_a_hosted_web_search_is_journaled_with_the_response_and_taints_the_context() -> None:
    @function_tool
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    search = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "weather in Pune"}}
    with FakeProvider(openai_response(search, response_call("c1", "note", '{"text": "31C"}'))
                      ) as server:
        agent = Agent("searcher", tools=[WebSearchTool(), note],
                      model=OpenAIResponsesModel("gpt-4o-mini", client(server)))
        durable = DurableAgent(agent)
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "note the weather in Pune"})
        s = drive(engine, run_id)
        assert [t["type"] for t in server.received[0].body["tools"]] == ["web_search",
                                                                          "function"]
    [responded] = of_type(engine, run_id, ev.ModelResponded)
    assert responded.request["tools"][0] == {"hosted": "WebSearchTool",
                                             "config": {"search_context_size": "medium"}}
    assert responded.response["output"][0]["type"] == "web_search_call"
    # What the search found may carry an attacker's words: the note waits for a person.
    assert s.status == "waiting" and s.pending_approval is not None
    assert s.pending_approval.rule_id == "untrusted-argument"
    assert s.pending_approval.evidence["held_by"][0]["sources"] == ["web_search"]


def test_replay_and_deploy_check_find_no_change_on_unchanged_code(tmp_path: Path) -> None:
    with FakeProvider(calls(("c1", "lookup", {"city": "Pune"})),
                      calls(("c2", "pay", {"account": "ACC-1", "amount": 5}))) as server:
        agent = Agent("auditable", tools=[lookup, pay], model=chat(server))
        durable = DurableAgent(agent, tools={"lookup": {"read_only": True,
                                                        "trusted_output": True}})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "pay"})
        s = drive(engine, run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    # The same code, replayed without a model or a tool: the journal answers every call.
    replayed = asyncio.run(replay_run(engine.store, run_id, flows=[durable.flow]))
    assert replayed.divergences == [] and replayed.changes == []
    report = asyncio.run(check_deploy(engine.store, [durable.flow]))
    assert report.ok and (report.checked, report.rerun) == (1, 1)


def test_the_sdk_run_context_is_made_from_the_step() -> None:
    seen: list[Any] = []

    @function_tool
    def whoami(ctx: RunContextWrapper[dict[str, str]]) -> str:
        """Who the agent runs for."""
        seen.append(ctx.context)
        return ctx.context["run"]

    with FakeProvider(calls(("c1", "whoami", {})), openai_completion(content="ok")) as server:
        agent = Agent("context", tools=[whoami], model=chat(server))
        durable = DurableAgent(agent, tools={"whoami": {"read_only": True}},
                               context=lambda ctx: {"run": ctx.run_id})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "who?"})
        s = drive(engine, run_id)
    assert s.status == "completed" and seen == [{"run": run_id}]
    assert of_type(engine, run_id, ev.ToolSucceeded)[0].result == run_id


def test_a_call_proposed_beside_an_untrusted_one_is_not_tainted_by_it() -> None:
    notes: list[str] = []

    @function_tool
    def jot(text: str) -> str:
        """Write a note."""
        notes.append(text)
        return "noted"

    with FakeProvider(calls(("c1", "lookup", {"city": "Pune"}), ("c2", "jot", {"text": "a"})),
                      calls(("c3", "jot", {"text": "31C"}))) as server:
        agent = Agent("jotter", tools=[lookup, jot], model=chat(server))
        durable = DurableAgent(agent, tools={"lookup": {"read_only": True}})
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "jot"})
        s = drive(engine, run_id)
    # The first note was proposed before the model read the lookup's output; the second,
    # after: only the second waits for a person.
    assert notes == ["a"]
    assert s.status == "waiting" and s.pending_approval is not None
    assert s.pending_approval.args == {"text": "31C"}


def test_a_model_named_by_string_comes_from_the_run_configs_provider() -> None:
    with FakeProvider(openai_completion(content="Hi")) as server:
        provider = OpenAIProvider(openai_client=client(server), use_responses=False)
        agent = Agent("named", model="gpt-4o-mini")
        durable = DurableAgent(agent, run_config=RunConfig(model_provider=provider))
        engine, _ = memory_engine([durable.flow])
        run_id, _ = engine.start(durable.flow, {"input": "Hello"})
        s = drive(engine, run_id)
        assert [r.path for r in server.received] == ["/v1/chat/completions"]
    assert s.status == "completed" and s.result == "Hi"
    [responded] = of_type(engine, run_id, ev.ModelResponded)
    assert responded.model == "gpt-4o-mini"
