"""AnthropicMessages against a local server speaking the Messages API wire format, through the
real ``anthropic`` SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fakes.model_provider import FakeProvider, anthropic_error, anthropic_message
from underway.errors import ConfigurationError
from underway.models import (
    AnthropicMessages,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
)
from underway.models.anthropic_messages import RESPONSE_TOOL
from underway.retry import RetryPolicy

KEY = "sk-ant-test-0123456789abcdefghijkl"

LOOKUP = ToolSpec(
    name="lookup_order",
    description="Find an order by id.",
    parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
)


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def adapter(server: FakeProvider, **options: Any) -> AnthropicMessages:
    options.setdefault("sleep", Sleeps())
    options.setdefault("jitter", lambda: 0.5)
    return AnthropicMessages("claude-sonnet-4-20250514", api_key=KEY, base_url=server.origin,
                             **options)


def ask(model: AnthropicMessages, request: ModelRequest) -> ModelResponse:
    async def go() -> ModelResponse:
        async with model:
            return await model.send(request)

    return asyncio.run(go())


def test_system_prompt_is_separated_and_usage_priced() -> None:
    request = ModelRequest(
        messages=[Message.system("You are terse."), Message.user("Hi"),
                  Message.system("Answer in English.")],
        temperature=0.3,
    )
    with FakeProvider(anthropic_message({"type": "text", "text": "Hello."},
                                        input_tokens=1000, output_tokens=100,
                                        cache_read_input_tokens=2000)) as server:
        reply = ask(adapter(server), request)

    [sent] = server.received
    assert sent.path == "/v1/messages"
    assert "anthropic-version" in sent.headers
    assert any(KEY in value for value in sent.headers.values())  # the credential was sent
    assert sent.body == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 4096,
        "system": "You are terse.\n\nAnswer in English.",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.3,
    }
    assert reply.text == "Hello."
    assert reply.stop_reason == "end_turn"
    assert reply.model == "claude-sonnet-4-20250514"
    assert (reply.tokens_in, reply.tokens_out, reply.cached_tokens_in) == (3000, 100, 2000)
    # default example prices for claude-sonnet-4*: $3 in, $0.30 cached, $15 out per 1M
    assert reply.cost_usd == pytest.approx((1000 * 3 + 2000 * 0.30 + 100 * 15) / 1e6)


def test_tool_use_and_tool_results_map_to_blocks_and_parallel_results_share_a_turn() -> None:
    request = ModelRequest(
        messages=[
            Message.user("Where are orders 1 and 2?"),
            Message.assistant("Looking.", [
                ToolCall.from_arguments("tu_1", "lookup_order", {"order_id": "1"}),
                ToolCall.from_arguments("tu_2", "lookup_order", {"order_id": "2"}),
            ]),
            Message.tool("tu_1", "shipped"),
            Message.tool("tu_2", "pending"),
            Message.user("Summarise."),
        ],
        tools=[LOOKUP],
        max_tokens=300,
    )
    with FakeProvider(anthropic_message({"type": "text", "text": "1 shipped, 2 pending."})) as s:
        ask(adapter(s), request)

    body = s.received[0].body
    assert body["max_tokens"] == 300
    assert body["tools"] == [{"name": "lookup_order", "description": "Find an order by id.",
                              "input_schema": LOOKUP.parameters}]
    assert body["messages"] == [
        {"role": "user", "content": "Where are orders 1 and 2?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "tu_1", "name": "lookup_order",
             "input": {"order_id": "1"}},
            {"type": "tool_use", "id": "tu_2", "name": "lookup_order",
             "input": {"order_id": "2"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "shipped"},
            {"type": "tool_result", "tool_use_id": "tu_2", "content": "pending"},
            {"type": "text", "text": "Summarise."},
        ]},
    ]


def test_parallel_tool_use_in_the_reply() -> None:
    with FakeProvider(anthropic_message(
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "tu_1", "name": "lookup_order", "input": {"order_id": "1"}},
        {"type": "tool_use", "id": "tu_2", "name": "lookup_order", "input": {"order_id": "2"}},
        stop_reason="tool_use",
    )) as server:
        reply = ask(adapter(server), ModelRequest(messages=[Message.user("?")], tools=[LOOKUP]))

    assert reply.stop_reason == "tool_calls"
    assert reply.provider_stop_reason == "tool_use"
    assert reply.text == "Checking both."
    assert [(c.id, c.arguments, c.raw_arguments) for c in reply.tool_calls] == [
        ("tu_1", {"order_id": "1"}, '{"order_id":"1"}'),
        ("tu_2", {"order_id": "2"}, '{"order_id":"2"}'),
    ]


def test_malformed_tool_input_from_a_compatible_server_is_kept_not_raised() -> None:
    with FakeProvider(anthropic_message(
        {"type": "tool_use", "id": "tu_1", "name": "lookup_order", "input": '{"order_id": '},
        stop_reason="tool_use",
    )) as server:
        reply = ask(adapter(server), ModelRequest(messages=[Message.user("?")], tools=[LOOKUP]))

    [call] = reply.tool_calls
    assert call.arguments is None
    assert call.raw_arguments == '{"order_id": '
    assert call.error is not None and "not valid JSON" in call.error


def test_response_schema_is_a_forced_tool_and_comes_back_as_text() -> None:
    schema = {"type": "object", "properties": {"label": {"type": "string"}},
              "required": ["label"]}
    with FakeProvider(anthropic_message(
        {"type": "tool_use", "id": "tu_9", "name": RESPONSE_TOOL, "input": {"label": "refund"}},
        stop_reason="tool_use",
    )) as server:
        reply = ask(adapter(server), ModelRequest(messages=[Message.user("Classify: ...")],
                                                  response_schema=schema, kind="classify"))

    body = server.received[0].body
    assert body["tool_choice"] == {"type": "tool", "name": RESPONSE_TOOL}
    assert [t["name"] for t in body["tools"]] == [RESPONSE_TOOL]
    assert body["tools"][0]["input_schema"] == schema
    assert reply.parsed == {"label": "refund"}
    assert reply.text == '{"label": "refund"}'
    assert reply.tool_calls == []
    assert reply.stop_reason == "end_turn"


def test_response_schema_beside_real_tools_lets_the_model_pick_any_tool() -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    with FakeProvider(anthropic_message(
        {"type": "tool_use", "id": "tu_9", "name": RESPONSE_TOOL, "input": {"value": ["a"]}},
        stop_reason="tool_use",
    )) as server:
        reply = ask(adapter(server), ModelRequest(messages=[Message.user("List")],
                                                  tools=[LOOKUP], response_schema=schema))

    body = server.received[0].body
    assert body["tool_choice"] == {"type": "any"}
    assert body["tools"][1]["input_schema"] == {
        "type": "object", "properties": {"value": schema}, "required": ["value"]}
    assert reply.parsed == ["a"]


def test_a_tool_named_like_the_response_tool_is_refused() -> None:
    model = AnthropicMessages("claude-sonnet-4-20250514", api_key=KEY)
    clash = ModelRequest(messages=[Message.user("x")], tools=[ToolSpec(name=RESPONSE_TOOL)],
                         response_schema={"type": "object"})
    with pytest.raises(ConfigurationError, match="rename it"):
        model.params(clash)


def test_rate_limit_then_overload_are_retried_honouring_retry_after() -> None:
    sleeps = Sleeps()
    with FakeProvider(
        anthropic_error(429, "rate_limit_error", "Too many requests", {"retry-after": "3"}),
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_message({"type": "text", "text": "ok"}),
    ) as server:
        reply = ask(adapter(server, sleep=sleeps, jitter=lambda: 0.25),
                    ModelRequest(messages=[Message.user("hi")]))

    assert reply.text == "ok"
    assert reply.attempts == 3
    assert sleeps.waits == [3.0, 2.0 * 0.25]  # Retry-After, then the second back-off step
    assert len({r.raw for r in server.received}) == 1


def test_invalid_request_raises_model_error_with_the_provider_message() -> None:
    with (
        FakeProvider(anthropic_error(400, "invalid_request_error",
                                     "messages: roles must alternate")) as server,
        pytest.raises(ModelError) as caught,
    ):
        ask(adapter(server), ModelRequest(messages=[Message.user("hi")]))

    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert caught.value.provider_message == "messages: roles must alternate"
    assert caught.value.provider == "anthropic"
    assert len(server.received) == 1


def test_exhausted_retries_raise_a_retryable_model_error() -> None:
    with (
        FakeProvider(*[anthropic_error(500, "api_error", "Internal")] * 2) as server,
        pytest.raises(ModelError) as caught,
    ):
        ask(adapter(server, retry=RetryPolicy(max_attempts=2)),
            ModelRequest(messages=[Message.user("hi")]))
    assert (caught.value.status, caught.value.retryable, caught.value.attempts) == (500, True, 2)
    assert len(server.received) == 2
