"""Tools from MCP servers, as underway tools.

A :class:`Toolset` reads the tools of one server and makes an underway
:class:`~underway.Tool` of each. Its JSON Schema is the tool's argument schema. Its
annotations set the tool's effect flags (:func:`flags`), unless the user overrides them.
A :class:`Stdio` server runs inside the sandbox, under its profile's egress allow-list; an
:class:`HTTP` server is reached only at the hosts it allows. See docs/tools.md.

Needs the ``mcp`` extra: ``pip install 'underway[mcp]'``.
"""

from __future__ import annotations

from .._extras import needs_extra

with needs_extra("mcp", "underway.mcp"):
    import mcp as _sdk  # noqa: F401  (first, so a missing SDK is named before anything)

    from ..effects._mcp_hints import ToolFlags, flags
    from ._errors import ToolError, ToolVanished
    from ._schema import MCPArguments
    from ._servers import HTTP, Server, Stdio
    from ._toolset import Toolset
    from ._wire import FENCE_META, KEY_META

__all__ = [
    "FENCE_META",
    "HTTP",
    "KEY_META",
    "MCPArguments",
    "Server",
    "Stdio",
    "ToolError",
    "ToolFlags",
    "ToolVanished",
    "Toolset",
    "flags",
]
