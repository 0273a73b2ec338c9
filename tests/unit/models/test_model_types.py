"""The typed request and response shapes, and their JSON form at the engine boundary."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

import underway as uw
from underway.errors import ConfigurationError
from underway.models import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec


def test_tool_call_arguments_parse_or_carry_the_error() -> None:
    ok = ToolCall.parse("c1", "search", '{"q": "tea"}')
    assert (ok.arguments, ok.error) == ({"q": "tea"}, None)
    bad = ToolCall.parse("c2", "search", '{"q": "tea"')
    assert bad.arguments is None
    assert bad.raw_arguments == '{"q": "tea"'
    assert bad.error is not None and bad.error.startswith("arguments are not valid JSON")
    assert ToolCall.parse("c3", "search", "42").error == (
        "arguments must be a JSON object, not int")
    assert ToolCall.parse("c4", "now", "").arguments == {}


def test_messages_reject_fields_that_do_not_belong_to_their_role() -> None:
    call = ToolCall.parse("c1", "search", "{}")
    with pytest.raises(ValidationError, match="only assistant messages carry tool_calls"):
        Message(role="user", content="hi", tool_calls=[call])
    with pytest.raises(ValidationError, match="needs the tool_call_id"):
        Message(role="tool", content="result")
    with pytest.raises(ValidationError, match="tool messages only"):
        Message(role="user", content="hi", tool_call_id="c1")
    with pytest.raises(ValidationError):
        Message(role="robot", content="hi")  # type: ignore[arg-type]


def test_requests_reject_empty_conversations_bad_tool_names_and_duplicates() -> None:
    with pytest.raises(ValidationError):
        ModelRequest(messages=[])
    with pytest.raises(ValidationError, match="letters, digits"):
        ToolSpec(name="send email")
    with pytest.raises(ValidationError, match="repeated: search"):
        ModelRequest(messages=[Message.user("x")],
                     tools=[ToolSpec(name="search"), ToolSpec(name="search")])


def test_request_json_round_trips_and_omits_defaults() -> None:
    request = ModelRequest(
        messages=[Message.system("s"), Message.user("u"),
                  Message.assistant("", [ToolCall.parse("c1", "search", '{"q": 1}')]),
                  Message.tool("c1", "found", name="search")],
        tools=[ToolSpec(name="search", description="Search.")],
        kind="plan", max_tokens=100,
    )
    data = request.to_json()
    assert data["messages"][0] == {"role": "system", "content": "s"}
    assert data["kind"] == "plan"
    assert "temperature" not in data and "response_schema" not in data
    assert ModelRequest.from_json(data) == request


def test_a_malformed_request_says_what_is_wrong() -> None:
    with pytest.raises(ConfigurationError, match=r"not a valid model request.*messages"):
        ModelRequest.from_json({"messages": "hello"})


def test_response_json_round_trips_and_becomes_the_next_assistant_turn() -> None:
    response = ModelResponse(
        text="Let me look.", tool_calls=[ToolCall.parse("c1", "search", "{bad")],
        stop_reason="tool_calls", model="m-1", tokens_in=5, tokens_out=2, cost_usd=0.5,
    )
    again = ModelResponse.from_json(response.to_json())
    assert again == response
    turn = again.assistant_message()
    assert (turn.role, turn.content, turn.tool_calls) == ("assistant", "Let me look.",
                                                          response.tool_calls)
    with pytest.raises(ConfigurationError, match="not a model response"):
        ModelResponse.from_json({"text": "no model id"})


class RefundArgs(BaseModel):
    order_id: str
    amount: int


@uw.tool
async def refund(args: RefundArgs) -> dict[str, str]:
    """Refund part of an order."""
    return {"status": "ok"}


def test_tool_spec_from_an_underway_tool_uses_its_docstring_and_argument_schema() -> None:
    spec = ToolSpec.for_tool(refund)
    assert spec.name == "refund"
    assert spec.description == "Refund part of an order."
    assert spec.parameters["properties"].keys() == {"order_id", "amount"}
    assert spec.parameters["required"] == ["order_id", "amount"]
