"""The typed shape of a model request and response.

The engine journals model calls as JSON, so :class:`ModelRequest` and :class:`ModelResponse`
travel as JSON across ``ctx.model``: build a request, pass ``request.to_json()``, and read
the reply with ``ModelResponse.from_json(...)``. Every adapter speaks these two shapes, so a
flow does not change when the provider does.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigurationError
from ..events import JSON

if TYPE_CHECKING:
    from ..effects import Tool

__all__ = [
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Role",
    "StopReason",
    "ToolCall",
    "ToolSpec",
]

Role = Literal["system", "user", "assistant", "tool"]

StopReason = Literal["end_turn", "tool_calls", "max_tokens", "stop_sequence", "refusal", "other"]
"""Why the model stopped, the same words for every provider: it finished its turn, it asks
for tool calls, it hit ``max_tokens`` or a stop sequence, it refused, or something else (the
provider's own word is in ``ModelResponse.provider_stop_reason``)."""

# Both providers accept tool names of this shape and reject others with a 400.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """A tool call the model asked for.

    ``raw_arguments`` is the argument text exactly as the provider sent it. ``arguments`` is
    that text parsed into a JSON object, or ``None`` when it is not one; ``error`` then says
    why, so an agent can tell the model its call was malformed instead of crashing.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None = None
    raw_arguments: str = ""
    error: str | None = None

    @classmethod
    def parse(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        """A call whose arguments arrived as JSON text (which may be malformed).

        Empty text means no arguments (``{}``): some local servers send it for tools without
        parameters.

        Args:
            id: The call's id.
            name: The tool's name.
            raw_arguments: The arguments, as JSON text.
        """
        if not raw_arguments.strip():
            return cls(id=id, name=name, arguments={}, raw_arguments=raw_arguments)
        try:
            value = json.loads(raw_arguments)
        except ValueError as exc:
            return cls(
                id=id, name=name, raw_arguments=raw_arguments,
                error=f"arguments are not valid JSON: {exc}",
            )
        if not isinstance(value, dict):
            return cls(
                id=id, name=name, raw_arguments=raw_arguments,
                error=f"arguments must be a JSON object, not {type(value).__name__}",
            )
        return cls(id=id, name=name, arguments=value, raw_arguments=raw_arguments)

    @classmethod
    def from_arguments(cls, id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
        """A call whose arguments arrived already parsed (as Anthropic sends them).

        Args:
            id: The call's id.
            name: The tool's name.
            arguments: The arguments.
        """
        return cls(
            id=id, name=name, arguments=arguments,
            raw_arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
        )


class Message(_Frozen):
    """One turn of a conversation.

    ``tool_calls`` appear only on assistant messages. A ``tool`` message answers one call:
    ``tool_call_id`` names it and ``name`` may repeat the tool's name.
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _check_role_fields(self) -> Self:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.role != "tool" and (self.tool_call_id is not None or self.name is not None):
            raise ValueError("tool_call_id and name belong on tool messages only")
        return self

    @classmethod
    def system(cls, content: str) -> Message:
        """A system (instructions) message."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        """A user message."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
        """An assistant message, possibly asking for tool calls."""
        return cls(role="assistant", content=content, tool_calls=tool_calls or [])

    @classmethod
    def tool(cls, tool_call_id: str, content: str, *, name: str | None = None) -> Message:
        """The result of the tool call ``tool_call_id``, as text.

        Args:
            tool_call_id: The call it answers.
            content: The result.
            name: The tool's name, for providers that want it.
        """
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)


class ToolSpec(_Frozen):
    """A tool the model may call: its name, what it does, and a JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    @model_validator(mode="after")
    def _check_name(self) -> Self:
        if not _TOOL_NAME.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if self.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be an object schema")
        return self

    @classmethod
    def for_tool(cls, tool: Tool, *, description: str | None = None) -> ToolSpec:
        """The spec of an underway tool: its name, its docstring and its argument model's
        JSON Schema (an open object when the tool takes plain JSON)."""
        schema: dict[str, Any] = (
            tool.args_model.model_json_schema() if tool.args_model else {"type": "object"}
        )
        doc = description if description is not None else inspect.getdoc(tool.fn) or ""
        return cls(name=tool.name, description=doc, parameters=schema)


class ModelRequest(_Frozen):
    """What to ask a model.

    ``response_schema`` (a JSON Schema) asks for a JSON answer of that shape.
    ``kind`` names the task ("classify", "plan", ...) so a :class:`~underway.models.ModelRouter`
    can pick a model for it; adapters ignore it. ``max_tokens`` and ``temperature`` are left
    to the adapter's defaults when ``None``.
    """

    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    response_schema: dict[str, Any] | None = None
    kind: str = "default"
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check_tools(self) -> Self:
        names = [t.name for t in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tool names must be unique; repeated: {', '.join(dupes)}")
        return self

    def to_json(self) -> JSON:
        """The request as JSON for ``ctx.model`` (fields left at their defaults are omitted,
        which keeps the journal small)."""
        return self.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def from_json(cls, data: JSON) -> ModelRequest:
        """Read a request back; a malformed one raises a ConfigurationError saying why."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(
                f"not a valid model request: {exc.errors(include_url=False)}"
            ) from exc


class ModelResponse(_Frozen):
    """What a model answered, with its usage and cost.

    ``text`` is the answer (``None`` when the model only asked for tools); ``parsed`` is
    that text read as JSON when the request had a ``response_schema`` and the text is JSON.
    ``model`` is the concrete model id that answered. ``tokens_in`` counts every input
    token, ``cached_tokens_in`` the part served from the provider's prompt cache.
    ``attempts`` is how many requests it took (retries after rate limits or errors).
    """

    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: StopReason = "end_turn"
    provider_stop_reason: str | None = None
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    cached_tokens_in: int = 0
    cost_usd: float = 0.0
    parsed: Any = None
    attempts: int = 1

    def to_json(self) -> JSON:
        """The response as JSON (as journaled)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: JSON) -> ModelResponse:
        """Read a response back from what ``ctx.model`` returned."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(
                f"not a model response: {exc.errors(include_url=False)}; "
                "was the model an underway.models adapter?"
            ) from exc

    def assistant_message(self) -> Message:
        """This answer as the assistant turn to append to the conversation."""
        return Message.assistant(self.text or "", list(self.tool_calls))
