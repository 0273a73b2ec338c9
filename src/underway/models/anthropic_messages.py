"""Anthropic Messages (``POST {base_url}/v1/messages``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from .._extras import import_extra
from ..effects import Emit
from ..errors import ConfigurationError
from ..events import JSON
from ..retry import RetryPolicy
from ._adapter import Adapter
from ._adapter import api_key as resolve_key
from .pricing import PriceTable
from .retries import RetryNotice
from .types import Message, ModelRequest, ModelResponse, StopReason, ToolCall

__all__ = ["RESPONSE_TOOL", "AnthropicMessages"]

RESPONSE_TOOL = "respond"
"""The tool through which the model gives a structured answer when the request has a
``response_schema``; it never appears among the response's ``tool_calls``."""

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
}


class AnthropicMessages(Adapter):
    """A Claude model behind the Messages API.

    System messages become the ``system`` prompt. Assistant tool calls become ``tool_use``
    blocks and tool messages ``tool_result`` blocks. A ``response_schema`` is realised as a
    tool named :data:`RESPONSE_TOOL` whose input schema is that schema. The model is made to
    call it (any tool, when the request also offers its own tools). Its input comes back as
    the response's ``text`` (JSON) and ``parsed``.

    Args:
        model: The model id.
        api_key: The key; None reads ``ANTHROPIC_API_KEY``.
        base_url: Points at a proxy or a compatible server.
        name: The model's name; None means ``anthropic:<model>``.
        prices: Prices calls; None means the maintained table.
        timeout: Seconds a request may take.
        default_max_tokens: ``max_tokens`` (required by the API) when the request sets none.
        retry: Attempts and back-off, as for :class:`OpenAIChat`.
        max_retry_after: The longest provider-requested wait honoured in-process.
        on_retry: Called before each retry.
        sleep: Waits between retries; injectable for tests.
        jitter: A number in [0, 1) for the back-off; injectable for tests.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str | None = None,
        prices: PriceTable | None = None,
        timeout: float = 60.0,
        default_max_tokens: int = 4096,
        retry: RetryPolicy | None = None,
        max_retry_after: float = 60.0,
        on_retry: Callable[[RetryNotice], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        anthropic = import_extra("anthropic", what="AnthropicMessages")
        key = resolve_key(api_key, env="ANTHROPIC_API_KEY", base_url=base_url,
                          adapter="AnthropicMessages")
        if default_max_tokens < 1:
            raise ConfigurationError("default_max_tokens must be at least 1")
        super().__init__(
            model, name=name, secret=key, sdk=anthropic, prices=prices, retry=retry,
            make_client=lambda: anthropic.AsyncAnthropic(
                api_key=key, base_url=base_url, timeout=timeout, max_retries=0
            ),
            max_retry_after=max_retry_after, sleep=sleep, jitter=jitter, on_retry=on_retry,
        )
        self.base_url = base_url
        self.default_max_tokens = default_max_tokens

    def max_output(self, request: ModelRequest) -> int | None:
        """The request's ``max_tokens``, else the adapter's default (the API needs one)."""
        return request.max_tokens or self.default_max_tokens

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The ``messages.create`` arguments for ``request``."""
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens or self.default_max_tokens,
            "messages": _messages([m for m in request.messages if m.role != "system"]),
        }
        if system:
            params["system"] = system
        tools: list[dict[str, Any]] = [
            {"name": t.name, **({"description": t.description} if t.description else {}),
             "input_schema": t.parameters}
            for t in request.tools
        ]
        if request.response_schema is not None:
            if any(t.name == RESPONSE_TOOL for t in request.tools):
                raise ConfigurationError(
                    f"a tool named {RESPONSE_TOOL!r} clashes with the structured-response "
                    "tool of AnthropicMessages; rename it"
                )
            tools.append({
                "name": RESPONSE_TOOL,
                "description": "Give your final answer as this tool's input. "
                               "It must match the input schema.",
                "input_schema": _object_schema(request.response_schema),
            })
            params["tool_choice"] = (
                {"type": "any"} if request.tools else {"type": "tool", "name": RESPONSE_TOOL}
            )
        if tools:
            params["tools"] = tools
        if request.temperature is not None:
            # Not a named parameter of every SDK release, but accepted on the wire.
            params["extra_body"] = {"temperature": request.temperature}
        return params

    async def call(self, params: dict[str, Any]) -> Any:
        """One ``POST /v1/messages``."""
        return await self.client().messages.create(**params)

    async def call_stream(self, params: dict[str, Any], emit: Emit) -> Any:
        """One streamed ``POST /v1/messages`` (the SDK's ``messages.stream``): text and
        tool-call deltas are emitted as they arrive, and the final message is what
        :meth:`call` would return. The input of the structured-answer tool
        (:data:`RESPONSE_TOOL`) is not streamed: it comes whole with the reply."""
        calls: dict[int, int] = {}
        """Content block index -> the tool call's place among the reply's tool calls."""
        try:
            async with self.client().messages.stream(**params) as events:
                async for event in events:
                    delta = _delta(event, calls)
                    if delta is not None:
                        await emit(delta)
                return await events.get_final_message()
        except httpx.TransportError as exc:
            raise self.lost(exc) from exc

    def response(self, raw: Any, request: ModelRequest, attempts: int) -> ModelResponse:
        """A Messages API reply as a :class:`ModelResponse`.

        Args:
            raw: The reply, as the SDK gives it.
            request: The request it answers.
            attempts: How many requests were sent.
        """
        texts: list[str] = []
        calls: list[ToolCall] = []
        parsed: Any = None
        answered = False
        for block in raw.content:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                if block.name == RESPONSE_TOOL and request.response_schema is not None:
                    parsed = _unwrap(request.response_schema, block.input)
                    answered = True
                else:
                    calls.append(_tool_call(block.id, block.name, block.input))
        provider_stop = raw.stop_reason
        stop: StopReason = _STOP.get(provider_stop or "", "other")
        if answered:
            text: str | None = json.dumps(parsed, ensure_ascii=False)
            if not calls:
                stop = "end_turn"
        else:
            text = "".join(texts) if texts else None
        u = raw.usage
        cached = getattr(u, "cache_read_input_tokens", None) or 0
        written = getattr(u, "cache_creation_input_tokens", None) or 0
        tokens_in = u.input_tokens + cached + written
        tokens_out = u.output_tokens
        model = raw.model or self.model
        return ModelResponse(
            text=text,
            tool_calls=calls,
            stop_reason=stop,
            provider_stop_reason=provider_stop,
            model=model,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cached_tokens_in=cached,
            cost_usd=self.cost(model, tokens_in, tokens_out, cached, written),
            parsed=parsed,
            attempts=attempts,
        )


def _delta(event: Any, calls: dict[int, int]) -> JSON:
    """The delta one stream event carries (None: none), learning tool blocks in ``calls``."""
    kind = event.type
    if kind == "text":
        return {"type": "text", "text": event.text}
    if kind == "content_block_start" and event.content_block.type == "tool_use":
        block = event.content_block
        if block.name == RESPONSE_TOOL:
            return None
        calls[event.index] = len(calls)
        return {"type": "tool_call", "index": calls[event.index], "id": block.id,
                "name": block.name, "arguments": ""}
    if (kind == "content_block_delta" and event.delta.type == "input_json_delta"
            and event.index in calls):
        return {"type": "tool_call", "index": calls[event.index], "id": None, "name": None,
                "arguments": event.delta.partial_json}
    return None


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat messages as Messages API turns; consecutive turns of one role are merged, as
    the API wants every ``tool_result`` of a parallel call in a single user turn."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "assistant" if m.role == "assistant" else "user"
        blocks = _blocks(m)
        if out and out[-1]["role"] == role:
            prev = out[-1]
            if isinstance(prev["content"], str):
                prev["content"] = [{"type": "text", "text": prev["content"]}]
            prev["content"].extend(
                blocks if isinstance(blocks, list) else [{"type": "text", "text": blocks}]
            )
        else:
            out.append({"role": role, "content": blocks})
    return out


def _blocks(m: Message) -> str | list[dict[str, Any]]:
    if m.role == "tool":
        return [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}]
    if m.role == "assistant" and m.tool_calls:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments or {}}
            for c in m.tool_calls
        )
        return blocks
    return m.content


def _tool_call(id: str, name: str, value: Any) -> ToolCall:
    # The API sends an object; a compatible server may send text, or something else.
    if isinstance(value, dict):
        return ToolCall.from_arguments(id, name, value)
    if isinstance(value, str):
        return ToolCall.parse(id, name, value)
    return ToolCall(
        id=id, name=name, raw_arguments=json.dumps(value),
        error=f"arguments must be a JSON object, not {type(value).__name__}",
    )


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Tool inputs must be objects: wrap any other schema in ``{"value": ...}``."""
    if schema.get("type") == "object":
        return schema
    return {"type": "object", "properties": {"value": schema}, "required": ["value"]}


def _unwrap(schema: dict[str, Any], value: Any) -> Any:
    if schema.get("type") == "object" or not isinstance(value, dict):
        return value
    return value.get("value")
