"""The errors of MCP tools."""

from __future__ import annotations

from ..errors import UnderwayError


class ToolVanished(UnderwayError):
    """The server no longer lists the tool a call names (it announced a changed tool
    list). Nothing was sent; the call fails, and is not retried.

    Args:
        server: The server's name.
        tool: The tool's name on the server.
        listed: What the server lists now.
    """

    retryable = False

    def __init__(self, server: str, tool: str, listed: list[str]) -> None:
        super().__init__(
            f"MCP server {server} no longer lists tool {tool!r}, so the call was not sent; "
            f"it lists {listed}")
        self.server = server
        self.tool = tool
        self.listed = listed


class ToolError(UnderwayError):
    """The server answered a call with an error: the tool's own (a result marked
    ``isError``) or the protocol's (a JSON-RPC error).

    Args:
        server: The server's name.
        tool: The tool's name on the server.
        message: What the server said.
        retryable: Whether trying again may help (a lost connection of a read-only call).
    """

    def __init__(self, server: str, tool: str, message: str, *, retryable: bool = False
                 ) -> None:
        super().__init__(f"MCP server {server}, tool {tool!r}: {message}")
        self.server = server
        self.tool = tool
        self.message = message
        self.retryable = retryable
