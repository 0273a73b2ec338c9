"""A pydantic-ai model behind underway's model door.

:class:`PydanticAIModel` is an underway model adapter: its request is pydantic-ai's
messages, settings and parameters as JSON, its reply the ``ModelResponse`` as JSON with
tokens and cost. :class:`JournaledModel` is the pydantic-ai side: a ``WrapperModel`` whose
every request goes through ``ctx.model`` of the step it runs in, so it is journaled,
quoted and counted by budgets, and a re-run reads the record instead of asking again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from pydantic import TypeAdapter
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters
from pydantic_ai.models import StreamedResponse as PaiStream
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext as PaiContext
from pydantic_core import to_jsonable_python

from ...effects import Emit, ModelQuote, ModelReply
from ...events import JSON
from ...flow import RunContext
from ...models.errors import ModelError
from .._provenance import Provenance

_PARAMS = TypeAdapter(ModelRequestParameters)
_RESPONSE = TypeAdapter(ModelResponse)

Decoded = tuple[list[ModelMessage], ModelSettings | None, ModelRequestParameters]


@dataclass
class StepScope:
    """What a pydantic-ai run inside an underway step needs: the step's context, the user's
    event stream handler, and the pydantic-ai run context of the request being streamed."""

    ctx: RunContext[Any, Any]
    agent: str
    handler: EventStreamHandler[Any] | None = None
    run_context: PaiContext[Any] | None = None
    sources: list[str] = field(default_factory=list)
    """Where the untrusted content in the agent's context came from (tool names, the run's
    lineage), in order of arrival."""
    provenance: Provenance | None = None
    """What trusted and untrusted sources put in the agent's context, per value."""
    pending: tuple[JSON, Decoded] | None = None
    """The request about to be sent and the objects it was encoded from: the adapter uses
    them instead of decoding its own JSON again."""


SCOPE: ContextVar[StepScope | None] = ContextVar("underway_pydantic_ai_scope", default=None)
"""The step a pydantic-ai run is inside (None: a plain run outside underway)."""


async def _no_emit(delta: JSON) -> None:
    """Where deltas go when the engine does not stream them (the handler still sees them)."""


class PydanticAIModel:
    """An underway model adapter over a pydantic-ai ``Model``.

    The request JSON holds ``messages`` (``ModelMessagesTypeAdapter``), ``settings`` and
    ``parameters``, and ``stream`` when the agent asked for a streamed response. The reply
    is the ``ModelResponse`` as JSON, with its input and output tokens and its cost priced
    by genai-prices (0 for a model it does not know).

    Args:
        model: The pydantic-ai model that answers.
    """

    def __init__(self, model: Model) -> None:
        self.wrapped = model
        self.name = f"pydantic-ai:{model.system}:{model.model_name}"

    async def complete(self, request: JSON) -> ModelReply:
        """Ask the model. A request marked ``stream`` is streamed all the same, so the run's
        handler sees its events when the call is made without ``stream=True``."""
        assert isinstance(request, dict)
        if request.get("stream"):
            return await self.stream(request, _no_emit)
        messages, settings, params = _decode(request)
        with self._failures():
            response = await self.wrapped.request(messages, settings, params)
        return self._reply(response)

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """A provider's transient failure (rate limit, outage, lost connection) as an
        underway :class:`~underway.models.ModelError` marked retryable: the engine asks
        again on a durable timer, holding no worker. Any other failure stays as it is."""
        try:
            yield
        except ModelAPIError as exc:
            status = getattr(exc, "status_code", None)
            transient = isinstance(exc, ModelRateLimitError | ModelUnavailableError
                                   | ModelServerError | ModelConnectionError) or (
                isinstance(status, int) and (status in (408, 409, 429) or status >= 500))
            if not transient:
                raise
            raise ModelError(self.wrapped.system, self.wrapped.model_name,
                             status=status if isinstance(status, int) else None,
                             provider_message=str(exc), retryable=True,
                             retry_after=exc.retry_after) from exc

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        """Stream the response: each pydantic-ai event goes to ``emit`` (as
        :func:`delta_of` says) and to the run's event stream handler; the complete
        response is returned."""
        messages, settings, params = _decode(request)
        scope = SCOPE.get()
        handler = scope.handler if scope is not None else None
        run_context = scope.run_context if scope is not None else None
        with self._failures():
            async with self.wrapped.request_stream(messages, settings, params,
                                                   run_context) as streamed:
                events = _tee(streamed, emit)
                if handler is not None and run_context is not None:
                    await handler(run_context, events)
                async for _ in events:
                    pass
        return self._reply(streamed.get())

    def quote(self, request: JSON) -> ModelQuote:
        """The most ``request`` can spend: its bytes bound its input tokens (a token is at
        least a byte) and the settings' ``max_tokens`` its output, priced by genai-prices."""
        assert isinstance(request, dict)
        tokens_in = len(json.dumps(request.get("messages")).encode())
        settings = request.get("settings")
        out = settings.get("max_tokens") if isinstance(settings, dict) else None
        if not isinstance(out, int):
            return ModelQuote(None, None, f"a request to {self.name} sets no max_tokens, so its "
                                          "output and cost have no bound; set max_tokens in "
                                          "the agent's model_settings")
        return ModelQuote(tokens_in + out, self._price(tokens_in, out))

    def _price(self, tokens_in: int, tokens_out: int) -> float | None:
        try:
            price = calc_price(PriceUsage(input_tokens=tokens_in, output_tokens=tokens_out),
                               self.wrapped.model_name, provider_id=self.wrapped.system)
        except LookupError:
            return None
        return float(price.total_price)

    def _reply(self, response: ModelResponse) -> ModelReply:
        usage = response.usage
        cost = self._price(usage.input_tokens, usage.output_tokens)
        return ModelReply(
            _RESPONSE.dump_python(response, mode="json"),
            response.model_name or self.wrapped.model_name,
            usage.input_tokens, usage.output_tokens, cost or 0.0,
        )

    def __repr__(self) -> str:
        return f"PydanticAIModel(name={self.name!r})"


def _decode(request: JSON) -> Decoded:
    scope = SCOPE.get()
    if scope is not None and scope.pending is not None and scope.pending[0] is request:
        return scope.pending[1]
    assert isinstance(request, dict)
    messages = ModelMessagesTypeAdapter.validate_python(request["messages"])
    settings: Any = request.get("settings")
    return messages, settings, _PARAMS.validate_python(request["parameters"])


def encode(messages: list[ModelMessage], settings: ModelSettings | None,
           params: ModelRequestParameters, *, stream: bool) -> JSON:
    """A pydantic-ai request as the JSON an underway model call journals."""
    request: dict[str, JSON] = {
        "messages": _steady(ModelMessagesTypeAdapter.dump_python(messages, mode="json")),
        "settings": to_jsonable_python(settings) if settings else None,
        "parameters": _PARAMS.dump_python(params, mode="json"),
    }
    if stream:
        request["stream"] = True
    return request


_VOLATILE = ("timestamp", "run_id", "conversation_id")
"""What pydantic-ai stamps on messages and parts from the clock and fresh ids: no model
sees it, and it differs each time the same request is made."""


def _steady(messages: list[dict[str, Any]]) -> JSON:
    """The messages without what differs between two makings of the same request, so that
    a re-run, a replay and ``deploy check`` of unchanged code see the request recorded."""
    for message in messages:
        for key in _VOLATILE:
            message.pop(key, None)
        for part in message.get("parts") or ():
            for key in _VOLATILE:
                part.pop(key, None)
    out: JSON = messages
    return out


async def _tee(streamed: PaiStream, emit: Emit) -> AsyncIterator[Any]:
    async for event in streamed:
        await emit(delta_of(event))
        yield event


def delta_of(event: Any) -> JSON:
    """The live-stream delta of a pydantic-ai stream event: text and tool-call deltas in
    the shapes every stream reader knows, any other event as ``{"type": "pydantic_ai",
    "event": ...}``."""
    part = event.part if isinstance(event, PartStartEvent) else (
        event.delta if isinstance(event, PartDeltaEvent) else None)
    if isinstance(part, TextPart) and part.content:
        return {"type": "text", "text": part.content}
    if isinstance(part, TextPartDelta) and part.content_delta:
        return {"type": "text", "text": part.content_delta}
    if isinstance(part, ToolCallPart):
        return _tool_call(event.index, part.tool_call_id, part.tool_name, part.args)
    if isinstance(part, ToolCallPartDelta):
        return _tool_call(event.index, part.tool_call_id, part.tool_name_delta,
                          part.args_delta)
    return {"type": "pydantic_ai", "event": to_jsonable_python(event)}


def _tool_call(index: int, call_id: str | None, name: str | None, args: Any) -> JSON:
    return {"type": "tool_call", "index": index, "id": call_id, "name": name,
            "arguments": args if isinstance(args, str) or args is None
            else json.dumps(args)}


def _sent(scope: StepScope, messages: list[ModelMessage]) -> None:
    """The model is sent ``messages``: its instructions and system prompts (the agent's,
    constants of the flow) are trusted, and so is what trusted sources gave back since the
    last request."""
    found = scope.provenance
    if found is None:
        return
    for message in messages:
        if isinstance(message, ModelRequest):
            found.instructions(message.instructions, *(
                p.content for p in message.parts if isinstance(p, SystemPromptPart)))
    found.seen()


class JournaledModel(WrapperModel):
    """The model a durable pydantic-ai run uses: each request is an underway model call.

    Outside an underway step it is the wrapped model, unchanged.
    """

    def __init__(self, model: Model) -> None:
        super().__init__(model)
        self.adapter = PydanticAIModel(self.wrapped)

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        scope = SCOPE.get()
        if scope is None:
            return await super().request(messages, model_settings, model_request_parameters)
        request = encode(messages, model_settings, model_request_parameters, stream=False)
        _sent(scope, messages)
        scope.pending = (request, (messages, model_settings, model_request_parameters))
        try:
            reply = await scope.ctx.model(self.adapter, request)
        finally:
            scope.pending = None
        return _RESPONSE.validate_python(reply)

    @asynccontextmanager
    async def request_stream(
        self, messages: list[ModelMessage], model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: PaiContext[Any] | None = None,
    ) -> AsyncGenerator[PaiStream]:
        scope = SCOPE.get()
        if scope is None:
            async with super().request_stream(messages, model_settings,
                                              model_request_parameters, run_context) as s:
                yield s
            return
        request = encode(messages, model_settings, model_request_parameters, stream=True)
        _sent(scope, messages)
        scope.run_context = run_context
        scope.pending = (request, (messages, model_settings, model_request_parameters))
        try:
            # The engine calls stream(): deltas go to the run's live stream as they come.
            reply = await scope.ctx.model(self.adapter, request, stream=True)
        finally:
            scope.run_context = scope.pending = None
        # The handler saw the live events inside the call (or, on a re-run, saw them then):
        # the agent's own stream replays none, so nobody sees an event twice.
        yield CompletedStreamedResponse(_RESPONSE.validate_python(reply),
                                        model_request_parameters=model_request_parameters)


