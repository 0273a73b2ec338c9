"""The options a user gives a framework's tool are underway.tool's own, checked the same
way wherever the tool comes from: pydantic-ai, the Agents SDK, or ``uw.tool``. A misspelt
option is refused with its name; ``read_only`` means what it means for ``uw.tool``."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent as SdkAgent
from agents import function_tool
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

import underway as uw
from underway.effects import tool_options
from underway.errors import ConfigurationError
from underway.integrations.openai_agents import DurableAgent as SdkDurable
from underway.integrations.pydantic_ai import DurableAgent


def pai_agent(seen: list[str]) -> Agent[None, str]:
    agent = Agent(TestModel())

    @agent.tool_plain
    def lookup(q: str) -> str:
        seen.append(q)
        return "Pune"

    return agent


def test_the_options_are_underway_tools_own() -> None:
    assert tool_options("tool 'x'", {"read_only": True, "hosts": ["a.example"]}) == {
        "read_only": True, "hosts": ["a.example"]}
    with pytest.raises(ConfigurationError, match=r"tool 'x': unknown options \['readonly'\]"):
        tool_options("tool 'x'", {"readonly": True})
    with pytest.raises(ConfigurationError, match=r"unknown options \['name'\]"):
        tool_options("tool 'x'", {"name": "y"})


def test_a_pydantic_ai_tool_takes_read_only_as_uw_tool_does() -> None:
    seen: list[str] = []
    durable = DurableAgent(pai_agent(seen), name="cities",
                           tools={"lookup": {"read_only": True, "trusted_output": True}})
    engine = uw.Engine(uw.connect("memory://"), flows=[durable.flow])
    run_id, _ = engine.start(durable.flow, {"prompt": "biggest city?"})
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed" and seen
    made = durable.tools.made["lookup"]
    assert (made.mutating, made.trusted_output) == (False, True)
    # The model reads the tool's own description, never underway's wrapper's.
    assert "underway tool made here" not in made.description


def test_a_misspelt_option_is_refused_for_every_kind_of_tool() -> None:
    with pytest.raises(ConfigurationError, match=r"tool 'lookup': unknown options \['readonly'\]"):
        DurableAgent(pai_agent([]), name="cities", tools={"lookup": {"readonly": True}})

    @function_tool
    def lookup(city: str) -> str:
        """The weather in a city."""
        return "31C"

    with pytest.raises(ConfigurationError, match=r"tool 'lookup': unknown options \['readonly'\]"):
        SdkDurable(SdkAgent("w", tools=[lookup]), tools={"lookup": {"readonly": True}})  # type: ignore[typeddict-unknown-key]
    # The same option, right, is taken.
    made = SdkDurable(SdkAgent("w", tools=[lookup]), tools={"lookup": {"read_only": True}})
    assert [t.mutating for t in made.tools] == [False]


def test_a_bad_option_value_is_refused_when_the_agent_is_wrapped() -> None:
    with pytest.raises(ConfigurationError, match="must be a bare host name"):
        DurableAgent(pai_agent([]), name="cities",
                     tools={"lookup": {"hosts": ["http://a.example/x"]}})
    with pytest.raises(ConfigurationError, match="money_direction must be"):
        DurableAgent(pai_agent([]), name="cities",
                     tools={"lookup": {"money_direction": "sideways"}})
