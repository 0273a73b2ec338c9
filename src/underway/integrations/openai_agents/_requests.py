"""The Agents SDK's model requests and responses as JSON, and :class:`AgentsModel`: an SDK
model as an underway model adapter, so ``ctx.model`` journals every call once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import openai
from agents import FileSearchTool, FunctionTool, Handoff, ModelSettings, WebSearchTool
from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import ModelBehaviorError
from agents.items import ModelResponse
from agents.models.interface import Model, ModelTracing
from agents.usage import Usage
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseOutputItemAddedEvent,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from ...effects import ModelQuote, ModelReply
from ...errors import ConfigurationError
from ...events import JSON, canonical_json
from ...models.errors import ModelError
from ...models.pricing import PriceTable
from ...models.retries import Failure, sdk_failure

HOSTED: dict[str, type[Any]] = {"WebSearchTool": WebSearchTool, "FileSearchTool": FileSearchTool}
"""The tools the provider runs itself that a durable agent may have: their calls and
results arrive inside the model's response, so the journal holds them with it."""

_SETTINGS: TypeAdapter[ModelSettings] = TypeAdapter(ModelSettings)
_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)


def encode_request(
    *, system_instructions: str | None, input: Any, model_settings: ModelSettings,
    tools: list[Any], output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
    previous_response_id: str | None, conversation_id: str | None, prompt: Any,
) -> dict[str, JSON]:
    """The arguments of one ``Model.get_response`` as JSON: what the journal keeps and what
    :func:`decode_request` turns back into the same call.

    Args:
        system_instructions: The agent's instructions.
        input: The conversation so far.
        model_settings: The agent's model settings.
        tools: The tools the model may call (function tools and hosted ones).
        output_schema: The shape of the final output, if any.
        handoffs: The agents the model may hand over to.
        previous_response_id: A server-side conversation to continue.
        conversation_id: A server-side conversation to join.
        prompt: A stored prompt of the provider's.
    """
    encoded_tools: list[JSON] = []
    for t in tools:
        hosted = HOSTED.get(type(t).__name__)
        if hosted is not None and isinstance(t, hosted):
            encoded_tools.append({"hosted": type(t).__name__, "config": TypeAdapter(
                hosted).dump_python(t, mode="json", exclude_none=True)})
            continue
        if not isinstance(t, FunctionTool):
            raise ConfigurationError(
                f"tool {getattr(t, 'name', t)!r} is a {type(t).__name__}; a durable agent "
                "takes function tools (each runs through ctx.call) and the provider's "
                f"{' and '.join(HOSTED)}")
        encoded_tools.append({"name": t.name, "description": t.description,
                              "parameters": t.params_json_schema,
                              "strict": t.strict_json_schema})
    schema: JSON = None
    if output_schema is not None:
        plain = output_schema.is_plain_text()
        schema = {"name": output_schema.name(), "plain_text": plain,
                  "schema": None if plain else output_schema.json_schema(),
                  "strict": False if plain else output_schema.is_strict_json_schema()}
    return {
        "system_instructions": system_instructions,
        "input": to_jsonable_python(input),
        "model_settings": _SETTINGS.dump_python(model_settings, mode="json",
                                                exclude_none=True),
        "tools": encoded_tools,
        "output_schema": schema,
        "handoffs": [{"tool_name": h.tool_name, "tool_description": h.tool_description,
                      "input_json_schema": h.input_json_schema, "agent_name": h.agent_name,
                      "strict_json_schema": h.strict_json_schema} for h in handoffs],
        "previous_response_id": previous_response_id,
        "conversation_id": conversation_id,
        "prompt": to_jsonable_python(prompt),
    }


async def _not_here(*_: Any) -> Any:
    # A model only reads a tool's or handoff's description; running one happens in the step.
    raise RuntimeError("a tool or handoff rebuilt from a journaled request is never run")


class _OutputSchema(AgentOutputSchemaBase):
    """An output schema rebuilt from JSON: what a model reads of it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def is_plain_text(self) -> bool:
        return bool(self._data["plain_text"])

    def name(self) -> str:
        return str(self._data["name"])

    def json_schema(self) -> dict[str, Any]:
        return dict(self._data["schema"] or {})

    def is_strict_json_schema(self) -> bool:
        return bool(self._data["strict"])

    def validate_json(self, json_str: str) -> Any:
        raise ModelBehaviorError("the step validates the final output, not the model")


def decode_request(request: JSON) -> dict[str, Any]:
    """The keyword arguments of ``Model.get_response`` (and ``stream_response``) for a
    request :func:`encode_request` made."""
    if not isinstance(request, dict):
        raise ConfigurationError(f"an Agents SDK model request is a JSON object, not "
                                 f"{type(request).__name__}")
    schema = request.get("output_schema")
    return {
        "system_instructions": request.get("system_instructions"),
        "input": request["input"],
        "model_settings": _SETTINGS.validate_python(request.get("model_settings") or {}),
        "tools": [_tool(t) for t in request.get("tools") or []],
        "output_schema": _OutputSchema(schema) if isinstance(schema, dict) else None,
        "handoffs": [Handoff(tool_name=h["tool_name"], tool_description=h["tool_description"],
                             input_json_schema=h["input_json_schema"],
                             on_invoke_handoff=_not_here, agent_name=h["agent_name"],
                             strict_json_schema=h["strict_json_schema"])
                     for h in request.get("handoffs") or []],
        # The journal is the record; the SDK's own traces would send payloads elsewhere.
        "tracing": ModelTracing.DISABLED,
        "previous_response_id": request.get("previous_response_id"),
        "conversation_id": request.get("conversation_id"),
        "prompt": request.get("prompt"),
    }


def _tool(data: dict[str, Any]) -> Any:
    if "hosted" in data:
        return TypeAdapter(HOSTED[data["hosted"]]).validate_python(data["config"])
    return FunctionTool(name=data["name"], description=data["description"],
                        params_json_schema=data["parameters"], on_invoke_tool=_not_here,
                        strict_json_schema=data["strict"])


def encode_response(response: ModelResponse) -> JSON:
    """An SDK model response as JSON."""
    return _RESPONSE.dump_python(response, mode="json")


def decode_response(data: JSON) -> ModelResponse:
    """The SDK model response :func:`encode_response` made ``data`` of."""
    return _RESPONSE.validate_python(data)


Emit = Callable[[JSON], Awaitable[None]]


class AgentsModel:
    """An Agents SDK model (``OpenAIResponsesModel``, ``OpenAIChatCompletionsModel`` or your
    own) as an underway model adapter.

    ``complete`` takes a request :func:`encode_request` made, asks the SDK model, and
    returns its response as JSON with tokens and cost, so the engine journals it once and
    budgets count it.

    Args:
        model: The SDK model.
        model_id: The model's id, for prices (None: the SDK model's ``model`` attribute).
        prices: Prices calls; None means the maintained table.
    """

    def __init__(self, model: Model, *, model_id: str | None = None,
                 prices: PriceTable | None = None) -> None:
        self.model = model
        found = model_id or getattr(model, "model", None)
        self.model_id = found if isinstance(found, str) and found else type(model).__name__
        self.name = f"openai-agents:{self.model_id}"
        self.prices = prices if prices is not None else PriceTable.default()

    async def complete(self, request: JSON) -> ModelReply:
        """Ask the SDK model; its response as JSON, with its usage and cost.

        Raises:
            ModelError: The provider refused or could not be reached; ``retryable`` says
                whether the engine asks again later, on a durable timer.
        """
        try:
            response = await self.model.get_response(**decode_request(request))
        except openai.APIError as exc:
            raise self._failed(exc) from exc
        return self._reply(response)

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        """Ask the SDK model for a stream: each text and tool-call delta goes to ``emit`` as
        it arrives; the complete response comes back as from :meth:`complete`."""
        try:
            done = await self._stream(request, emit)
        except openai.APIError as exc:
            raise self._failed(exc) from exc
        return self._reply(done)

    async def _stream(self, request: JSON, emit: Emit) -> ModelResponse:
        names: dict[str, tuple[int, str, str]] = {}
        done: ModelResponse | None = None
        async for event in self.model.stream_response(**decode_request(request)):
            if isinstance(event, ResponseTextDeltaEvent):
                await emit({"type": "text", "text": event.delta})
            elif isinstance(event, ResponseOutputItemAddedEvent):
                item = event.item
                if item.type == "function_call":
                    names[item.id or ""] = (event.output_index, item.call_id, item.name)
            elif isinstance(event, ResponseFunctionCallArgumentsDeltaEvent):
                index, call_id, name = names.get(event.item_id, (event.output_index, "", ""))
                await emit({"type": "tool_call", "index": index, "id": call_id, "name": name,
                            "arguments": event.delta})
            elif isinstance(event, ResponseCompletedEvent):
                r = event.response
                usage = Usage(requests=1)
                if r.usage is not None:
                    usage = Usage(requests=1, input_tokens=r.usage.input_tokens,
                                  output_tokens=r.usage.output_tokens,
                                  total_tokens=r.usage.total_tokens,
                                  input_tokens_details=r.usage.input_tokens_details,
                                  output_tokens_details=r.usage.output_tokens_details)
                done = ModelResponse(output=list(r.output), usage=usage, response_id=r.id)
        if done is None:
            raise ModelBehaviorError(f"{self.name}: the stream ended without a response")
        return done

    def _failed(self, exc: openai.APIError) -> ModelError:
        """The provider's failure as underway's :class:`ModelError` (a rate limit or an
        outage is retryable; a bad request is not)."""
        found = sdk_failure(exc, status_error=openai.APIStatusError,
                            connection_error=openai.APIConnectionError)
        if found is None:
            found = Failure(None, str(exc), False)
        return ModelError("openai", self.model_id, status=found.status,
                          provider_message=found.message, retryable=found.retryable,
                          retry_after=found.retry_after)

    def _reply(self, response: ModelResponse) -> ModelReply:
        usage = response.usage
        cached = usage.input_tokens_details.cached_tokens or 0
        cost = self.prices.cost(self.model_id, usage.input_tokens, usage.output_tokens,
                                cached, provider="openai")
        return ModelReply(encode_response(response), self.model_id, usage.input_tokens,
                          usage.output_tokens, cost or 0.0)

    def quote(self, request: JSON) -> ModelQuote:
        """The most ``request`` can spend: its bytes bound its input tokens (a token is at
        least a byte) and ``max_tokens`` its output, at the dearest rate that applies."""
        tokens_in = len(canonical_json(request))
        settings = request.get("model_settings") if isinstance(request, dict) else None
        out = settings.get("max_tokens") if isinstance(settings, dict) else None
        if not isinstance(out, int):
            return ModelQuote(None, None, f"a request to {self.name} sets no max_tokens, so "
                                          "its output and cost have no bound; set "
                                          "ModelSettings(max_tokens=...) on the agent")
        cost = self.prices.most(self.model_id, tokens_in, out, provider="openai")
        if cost is None:
            return ModelQuote(tokens_in + out, None,
                              f"model {self.model_id!r} has no price in the price table or "
                              "genai-prices; give it one in the prices TOML")
        return ModelQuote(tokens_in + out, cost)

    def __repr__(self) -> str:
        return f"AgentsModel(name={self.name!r})"
