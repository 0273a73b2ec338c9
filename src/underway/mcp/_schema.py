"""An MCP tool's JSON Schema as an underway argument model, and its result as JSON.

The argument model validates a call with the tool's own JSON Schema (``jsonschema``, the
validator the MCP SDK uses), so the guard refuses an invalid call as it refuses any
other (``SchemaValidationFailed``), before anything reaches the server. The model shows
models the server's schema unchanged (``model_json_schema``). Each top-level property is
also a field, under its own name as alias, so a tool's ``amount`` or ``account`` options
can name it.
"""

from __future__ import annotations

import keyword
from typing import Any, ClassVar

import jsonschema
import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from ..errors import ConfigurationError
from ..events import JSON

MAX_ERRORS = 10
"""Schema errors a refusal lists (the rest are counted)."""


class MCPArguments(BaseModel):
    """The arguments of a call of an MCP tool, checked against the tool's JSON Schema.

    ``arguments()`` gives them back as they were passed.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    validator: ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _against_schema(cls, value: Any) -> Any:
        value = {} if value is None else value
        errors = sorted(cls.validator.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            shown = [f"{'.'.join(map(str, e.path)) or '(arguments)'}: {e.message}"
                     for e in errors[:MAX_ERRORS]]
            more = len(errors) - len(shown)
            raise ValueError("; ".join(shown) + (f"; and {more} more" if more else ""))
        return value

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The server's input schema, as the server gave it."""
        return cls.input_schema

    def arguments(self) -> dict[str, JSON]:
        """The arguments as passed (and checked)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


def arguments_model(server: str, tool: types.Tool) -> type[MCPArguments]:
    """The argument model of ``tool`` of ``server``.

    Raises:
        ConfigurationError: The tool's input schema is not a valid JSON Schema object.
    """
    schema = dict(tool.input_schema)
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(
            f"MCP server {server}: tool {tool.name!r} has an invalid input schema: "
            f"{exc.message}") from None
    if schema.get("type", "object") != "object":
        raise ConfigurationError(
            f"MCP server {server}: tool {tool.name!r} takes {schema.get('type')!r}, but a "
            "tool's arguments are an object")
    props = schema.get("properties")
    fields: dict[str, Any] = {}
    for i, prop in enumerate(props if isinstance(props, dict) else {}):
        plain = prop.isidentifier() and not keyword.iskeyword(prop) \
            and not prop.startswith(("_", "model_")) and not hasattr(BaseModel, prop)
        name = prop if plain else f"field_{i}"
        fields[name] = (Any, Field(default=None, alias=prop))
    model: type[MCPArguments] = create_model(
        _class_name(tool.name), __base__=MCPArguments, **fields)
    model.input_schema = schema
    model.validator = cls(schema)
    return model


def _class_name(tool: str) -> str:
    return "".join(p.capitalize() for p in "".join(
        c if c.isalnum() else " " for c in tool).split()) + "Arguments" or "Arguments"


def result_json(result: types.CallToolResult) -> JSON:
    """What a call returns to the step: the structured content when the server gives it;
    else the text, when every block is text; else every block as JSON."""
    if result.structured_content is not None:
        out: JSON = result.structured_content
        return out
    if all(isinstance(b, types.TextContent) for b in result.content):
        return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
    return [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content]


def error_text(result: types.CallToolResult) -> str:
    """The message of a result the server marked as an error."""
    text = result_json(result)
    return text if isinstance(text, str) else str(text)
