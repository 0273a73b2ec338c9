"""An MCP tool's JSON Schema as an underway argument model, and its result as JSON.

The argument model (:class:`MCPArguments`, made by
:func:`~underway.effects._schema_args.schema_arguments`) validates a call with the tool's
own JSON Schema (``jsonschema``, the validator the MCP SDK uses), so the guard refuses an
invalid call before anything reaches the server.
"""

from __future__ import annotations

import mcp_types as types

from ..effects._schema_args import SchemaArguments, schema_arguments
from ..events import JSON


class MCPArguments(SchemaArguments):
    """The arguments of a call of an MCP tool, checked against the tool's JSON Schema.

    ``arguments()`` gives them back as they were passed; ``model_json_schema()`` is the
    server's schema, unchanged.
    """


def arguments_model(server: str, tool: types.Tool) -> type[MCPArguments]:
    """The argument model of ``tool`` of ``server``.

    Raises:
        ConfigurationError: The tool's input schema is not a valid JSON Schema object.
    """
    return schema_arguments(tool.name, tool.input_schema, where=f"MCP server {server}",
                            extra="mcp", base=MCPArguments)


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
