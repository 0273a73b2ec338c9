"""OpenAIChat against a local server speaking the Chat Completions wire format, through the
real ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fakes.model_provider import FakeProvider, closed_port_url, openai_completion, openai_error
from underway.models import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    OpenAIChat,
    Price,
    PriceTable,
    RetryNotice,
    ToolCall,
    ToolSpec,
)
from underway.retry import RetryPolicy

KEY = "sk-test-0123456789abcdefghijklmnop"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]},
)


class Sleeps:
    """Records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def adapter(server: FakeProvider, **options: Any) -> OpenAIChat:
    options.setdefault("sleep", Sleeps())
    options.setdefault("jitter", lambda: 0.5)
    return OpenAIChat("gpt-4o-mini", api_key=KEY, base_url=f"{server.origin}/v1", **options)


def ask(model: OpenAIChat, request: ModelRequest) -> ModelResponse:
    async def go() -> ModelResponse:
        async with model:
            return await model.send(request)

    return asyncio.run(go())


def hello(**fields: Any) -> ModelRequest:
    return ModelRequest(messages=[Message.system("Be brief."), Message.user("Hello")], **fields)


def test_plain_text_reply_maps_usage_model_and_cost() -> None:
    with FakeProvider(openai_completion(content="Hi there", prompt_tokens=1000,
                                        completion_tokens=200, cached_tokens=400)) as server:
        prices = PriceTable({"gpt-4o-mini*": Price(input=0.15, output=0.60, cached_input=0.075)})
        reply = ask(adapter(server, prices=prices), hello(max_tokens=64, temperature=0.0))

    assert reply.text == "Hi there"
    assert reply.tool_calls == []
    assert reply.stop_reason == "end_turn"
    assert reply.model == "gpt-4o-mini-2024-07-18"  # the concrete model that answered
    assert (reply.tokens_in, reply.tokens_out, reply.cached_tokens_in) == (1000, 200, 400)
    assert reply.cost_usd == pytest.approx((600 * 0.15 + 400 * 0.075 + 200 * 0.60) / 1e6)
    assert reply.attempts == 1

    [sent] = server.received
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Hello"}],
        "max_tokens": 64,
        "temperature": 0.0,
    }


def test_tools_and_a_conversation_with_tool_results_are_sent_as_function_tools() -> None:
    earlier = ToolCall.parse("call_1", "get_weather", '{"city": "Pune"}')
    request = ModelRequest(
        messages=[
            Message.user("Weather in Pune?"),
            Message.assistant("", [earlier]),
            Message.tool("call_1", '{"temp_c": 31}', name="get_weather"),
        ],
        tools=[WEATHER],
    )
    with FakeProvider(openai_completion(content="31°C in Pune.")) as server:
        ask(adapter(server), request)

    body = server.received[0].body
    assert body["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": WEATHER.parameters,
    }}]
    assert body["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Pune"}'},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 31}'},
    ]


def test_parallel_tool_calls_and_malformed_arguments_are_returned_not_raised() -> None:
    reply_calls = [
        ("call_a", "get_weather", '{"city": "Pune"}'),
        ("call_b", "get_weather", '{"city": "Oslo"'),  # truncated JSON
        ("call_c", "get_weather", '["Oslo"]'),          # JSON, but not an object
    ]
    with FakeProvider(openai_completion(tool_calls=reply_calls,
                                        finish_reason="tool_calls")) as server:
        reply = ask(adapter(server), hello(tools=[WEATHER]))

    assert reply.stop_reason == "tool_calls"
    assert reply.text is None
    good, truncated, listed = reply.tool_calls
    assert (good.id, good.name, good.arguments, good.error) == (
        "call_a", "get_weather", {"city": "Pune"}, None)
    assert truncated.arguments is None
    assert truncated.raw_arguments == '{"city": "Oslo"'
    assert truncated.error is not None and "not valid JSON" in truncated.error
    assert listed.arguments is None
    assert listed.error == "arguments must be a JSON object, not list"
    # The answer can go straight back into the conversation.
    assert reply.assistant_message().tool_calls == reply.tool_calls


def test_response_schema_becomes_a_json_schema_response_format() -> None:
    schema = {"title": "Verdict", "type": "object",
              "properties": {"label": {"type": "string"}}, "required": ["label"]}
    with FakeProvider(openai_completion(content='{"label": "spam"}')) as server:
        reply = ask(adapter(server), hello(response_schema=schema))

    assert server.received[0].body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "Verdict", "schema": schema},
    }
    assert reply.parsed == {"label": "spam"}


def test_openai_itself_gets_max_completion_tokens() -> None:
    params = OpenAIChat("gpt-4o-mini", api_key=KEY).params(hello(max_tokens=10))
    assert params["max_completion_tokens"] == 10
    assert "max_tokens" not in params


def test_rate_limit_is_retried_after_the_wait_the_server_asks_for() -> None:
    notices: list[RetryNotice] = []
    sleeps = Sleeps()
    with FakeProvider(
        openai_error(429, "Rate limit reached for requests", {"retry-after": "7"}),
        openai_completion(content="ok"),
    ) as server:
        reply = ask(adapter(server, sleep=sleeps, on_retry=notices.append), hello(tools=[WEATHER]))

    assert reply.text == "ok"
    assert reply.attempts == 2
    assert sleeps.waits == [7.0]
    first, second = server.received
    assert first.raw == second.raw  # the same request, byte for byte
    assert [(n.attempt, n.status, n.wait, n.retry_after) for n in notices] == [(1, 429, 7.0, 7.0)]
    assert notices[0].message == "Rate limit reached for requests"


def test_server_error_is_retried_with_exponential_backoff_and_jitter() -> None:
    sleeps = Sleeps()
    policy = RetryPolicy(max_attempts=4, initial_interval=2.0, backoff=3.0, max_interval=60.0)
    with FakeProvider(
        openai_error(500, "The server had an error"),
        openai_error(503, "Overloaded"),
        openai_completion(content="ok"),
    ) as server:
        reply = ask(adapter(server, sleep=sleeps, jitter=lambda: 0.5, retry=policy), hello())

    assert reply.text == "ok"
    assert reply.attempts == 3
    assert sleeps.waits == [2.0 * 0.5, 6.0 * 0.5]
    assert len({r.raw for r in server.received}) == 1


def test_bad_request_raises_model_error_without_retrying() -> None:
    sleeps = Sleeps()
    with (
        FakeProvider(openai_error(400, "Invalid schema for function 'get_weather'")) as server,
        pytest.raises(ModelError) as caught,
    ):
        ask(adapter(server, sleep=sleeps), hello(tools=[WEATHER]))

    err = caught.value
    assert (err.status, err.retryable, err.attempts) == (400, False, 1)
    assert err.provider_message == "Invalid schema for function 'get_weather'"
    assert "HTTP 400" in str(err) and "gpt-4o-mini" in str(err)
    assert len(server.received) == 1
    assert sleeps.waits == []


def test_unknown_model_is_not_retried() -> None:
    with (
        FakeProvider(openai_error(404, "The model `gpt-9` does not exist")) as server,
        pytest.raises(ModelError) as caught,
    ):
        ask(adapter(server), hello())
    assert (caught.value.status, caught.value.retryable) == (404, False)
    assert len(server.received) == 1


def test_exhausted_retries_raise_a_retryable_model_error() -> None:
    policy = RetryPolicy(max_attempts=3, initial_interval=1.0)
    with (
        FakeProvider(*[openai_error(502, "Bad gateway")] * 3) as server,
        pytest.raises(ModelError) as caught,
    ):
        ask(adapter(server, retry=policy), hello())

    assert (caught.value.status, caught.value.retryable, caught.value.attempts) == (502, True, 3)
    assert len(server.received) == 3


def test_a_wait_longer_than_allowed_is_left_to_the_caller() -> None:
    sleeps = Sleeps()
    with (
        FakeProvider(openai_error(429, "Try tomorrow", {"retry-after": "3600"})) as server,
        pytest.raises(ModelError) as caught,
    ):
        ask(adapter(server, sleep=sleeps, max_retry_after=60), hello())

    assert (caught.value.retryable, caught.value.retry_after) == (True, 3600.0)
    assert sleeps.waits == []
    assert len(server.received) == 1


def test_connection_refused_is_retried_then_reported() -> None:
    sleeps = Sleeps()
    model = OpenAIChat("local", base_url=f"{closed_port_url()}/v1", sleep=sleeps,
                       jitter=lambda: 1.0, retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ModelError) as caught:
        ask(model, hello())
    assert (caught.value.status, caught.value.retryable, caught.value.attempts) == (None, True, 2)
    assert sleeps.waits == [1.0]


def test_the_key_never_appears_in_errors_even_when_the_provider_echoes_it() -> None:
    echoed = f"Incorrect API key provided: {KEY}. Also seen as ...{KEY[-8:]}"
    with FakeProvider(openai_error(401, echoed)) as server, pytest.raises(ModelError) as caught:
        ask(adapter(server), hello())

    assert caught.value.status == 401 and not caught.value.retryable
    assert KEY not in str(caught.value) and KEY[-8:] not in str(caught.value)
    assert KEY not in caught.value.provider_message
    assert KEY not in repr(adapter(server))


def test_complete_speaks_json_for_the_engine() -> None:
    with FakeProvider(openai_completion(content="Hi", prompt_tokens=10,
                                        completion_tokens=2)) as server:
        model = adapter(server)

        async def go() -> Any:
            async with model:
                return await model.complete(hello().to_json())

        reply = asyncio.run(go())

    assert reply.model == "gpt-4o-mini-2024-07-18"
    assert (reply.tokens_in, reply.tokens_out) == (10, 2)
    assert reply.cost_usd == pytest.approx((10 * 0.15 + 2 * 0.60) / 1e6)
    assert ModelResponse.from_json(reply.response).text == "Hi"
    assert KEY not in json.dumps(reply.response)


def test_missing_key_for_openai_itself_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from underway.errors import ConfigurationError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChat("gpt-4o-mini")
