"""OpenAI Chat Completions, and every server that speaks it (vLLM, Ollama, llama.cpp, ...)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import httpx

from .._extras import import_extra
from ..effects import Emit
from ..events import JSON
from ..retry import RetryPolicy
from ._adapter import Adapter
from ._adapter import api_key as resolve_key
from .errors import ModelError
from .pricing import PriceTable
from .retries import RetryNotice
from .types import Message, ModelRequest, ModelResponse, StopReason, ToolCall

__all__ = ["OpenAIChat"]

_STOP: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "max_tokens",
    "content_filter": "refusal",
}

_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class OpenAIChat(Adapter):
    """A model behind ``POST {base_url}/chat/completions``.

    The key is sent as a header only: it is never logged, journaled or shown in an error.
    Retries are described in :mod:`underway.models.retries`.

    Args:
        model: The model id.
        api_key: The key; None reads ``OPENAI_API_KEY``. A server at a custom ``base_url``
            may need none.
        base_url: Selects the server: OpenAI by default (or ``OPENAI_BASE_URL``). Or a local
            one such as ``http://127.0.0.1:8000/v1`` (vLLM), ``http://127.0.0.1:11434/v1``
            (Ollama) or ``http://127.0.0.1:8080/v1`` (llama.cpp).
        name: The model's name; None means ``openai:<model>``.
        prices: Prices calls; None means the maintained table.
        timeout: Seconds a request may take.
        max_tokens_field: Names the request field for the length limit. OpenAI's current
            models take ``max_completion_tokens``, many local servers only ``max_tokens``.
            By default, the former for OpenAI and the latter for a custom ``base_url``.
        retry: Attempts and back-off.
        max_retry_after: The longest provider-requested wait honoured in-process.
        on_retry: Called before each retry.
        sleep: Waits between retries; injectable for tests.
        jitter: A number in [0, 1) for the back-off; injectable for tests.
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str | None = None,
        prices: PriceTable | None = None,
        timeout: float = 60.0,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None,
        retry: RetryPolicy | None = None,
        max_retry_after: float = 60.0,
        on_retry: Callable[[RetryNotice], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        openai = import_extra("openai", what="OpenAIChat")
        key = resolve_key(api_key, env="OPENAI_API_KEY", base_url=base_url, adapter="OpenAIChat")
        super().__init__(
            model, name=name, secret=key, sdk=openai, prices=prices, retry=retry,
            make_client=lambda: openai.AsyncOpenAI(
                api_key=key, base_url=base_url, timeout=timeout, max_retries=0
            ),
            max_retry_after=max_retry_after, sleep=sleep, jitter=jitter, on_retry=on_retry,
        )
        self.base_url = base_url
        self._stream_state = import_extra("openai.lib.streaming.chat", what="OpenAIChat",
                                          extra="openai").ChatCompletionStreamState
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if base_url is None else "max_tokens"
        )

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The ``chat.completions.create`` arguments for ``request``."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [_message(m) for m in request.messages],
        }
        if request.tools:
            params["tools"] = [
                {"type": "function", "function": {
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "parameters": t.parameters,
                }}
                for t in request.tools
            ]
        if request.response_schema is not None:
            title = request.response_schema.get("title")
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": title if isinstance(title, str) and _SCHEMA_NAME.match(title)
                else "response",
                "schema": request.response_schema,
            }}
        if request.max_tokens is not None:
            params[self.max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    async def call(self, params: dict[str, Any]) -> Any:
        """One ``POST /chat/completions``."""
        return await self.client().chat.completions.create(**params)

    async def call_stream(self, params: dict[str, Any], emit: Emit) -> Any:
        """One streamed ``POST /chat/completions`` (``stream_options.include_usage``, so
        the last chunk carries the usage): text and tool-call deltas are emitted as they
        arrive; the chunks add up to the completion :meth:`call` would return (the SDK's
        ``ChatCompletionStreamState``)."""
        state = self._stream_state()
        chunks = await self.client().chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True})
        try:
            async for chunk in chunks:
                state.handle_chunk(chunk)
                for delta in _deltas(chunk):
                    await emit(delta)
        except httpx.TransportError as exc:
            raise self.lost(exc) from exc
        finally:
            await chunks.close()
        return state.get_final_completion()

    def response(self, raw: Any, request: ModelRequest, attempts: int) -> ModelResponse:
        """A chat completion as a :class:`ModelResponse`.

        Args:
            raw: The completion, as the SDK gives it.
            request: The request it answers.
            attempts: How many requests were sent.
        """
        if not raw.choices:
            raise ModelError(
                self.provider, self.model, status=200,
                provider_message="the response has no choices", retryable=False,
                attempts=attempts,
            )
        choice = raw.choices[0]
        msg = choice.message
        calls = [
            ToolCall.parse(tc.id, tc.function.name, tc.function.arguments or "")
            for tc in (msg.tool_calls or [])
            if getattr(tc, "type", "function") == "function"
        ]
        text = msg.content
        finish = choice.finish_reason
        stop: StopReason = _STOP.get(finish or "", "other")
        refusal = getattr(msg, "refusal", None)
        if text is None and refusal:
            text, stop = refusal, "refusal"
        usage = raw.usage
        tokens_in = usage.prompt_tokens if usage else 0
        tokens_out = usage.completion_tokens if usage else 0
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
        model = raw.model or self.model
        return ModelResponse(
            text=text,
            tool_calls=calls,
            stop_reason=stop,
            provider_stop_reason=finish,
            model=model,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cached_tokens_in=cached,
            cost_usd=self.cost(model, tokens_in, tokens_out, cached),
            parsed=_json_or_none(text) if request.response_schema is not None else None,
            attempts=attempts,
        )


def _deltas(chunk: Any) -> list[JSON]:
    """The text and tool-call deltas of one streamed chunk."""
    out: list[JSON] = []
    for choice in chunk.choices[:1]:
        d = choice.delta
        if d.content:
            out.append({"type": "text", "text": d.content})
        for tc in d.tool_calls or []:
            fn = tc.function
            out.append({"type": "tool_call", "index": tc.index, "id": tc.id,
                        "name": fn.name if fn else None,
                        "arguments": (fn.arguments if fn else None) or ""})
    return out


def _message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {
                    "name": c.name,
                    "arguments": c.raw_arguments or json.dumps(c.arguments or {}),
                }}
                for c in m.tool_calls
            ],
        }
    return {"role": m.role, "content": m.content}


def _json_or_none(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
