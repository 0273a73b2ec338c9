"""A real MCP server over stdio, written with the official ``mcp`` SDK: an order lookup
declared read-only, and a refund and a note with no annotation. Each refund and note is
appended to the file named by ``$ORDERS_LEDGER``, an outside record of the effects."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("orders")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def order_status(order: str) -> str:
    """The status of an order."""
    return f"{order} is delivered, damaged"


@server.tool()
def refund(order: str, amount: int) -> str:
    """Refund an order."""
    with open(os.environ["ORDERS_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(f"{order} {amount}\n")
    return f"refunded {amount} for {order}"


@server.tool()
def note(order: str, text: str) -> str:
    """Add a note to an order."""
    with open(os.environ["ORDERS_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(f"note {order}: {text}\n")
    return f"noted on {order}"


if __name__ == "__main__":
    server.run("stdio")
