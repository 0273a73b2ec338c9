"""The shipping company: an MCP server (official SDK) over Streamable HTTP.

    python shipping.py LEDGER_DIR PORT

``quote`` reads the rate card (read-only, a closed world). ``book_courier`` books a pickup:
it has no annotations, so underway takes it at its worst (mutating, irreversible, its
output untrusted), and the courier does not deduplicate. ``find_booking`` tells whether a
booking was made under an idempotency key: what the agent's reconcile hook asks after a
crash hid a booking's outcome. Bookings are kept in ``LEDGER_DIR/bookings``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

LEDGER = Path(sys.argv[1]) / "bookings"
RATES = {"Pune": 90, "Mumbai": 120}
server = MCPServer("shipping")


def bookings() -> list[dict[str, Any]]:
    """Every booking made, in order."""
    return [json.loads(line) for line in LEDGER.read_text().splitlines()] \
        if LEDGER.exists() else []


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def quote(city: str, weight_kg: float) -> dict[str, Any]:
    """The price of a pickup to a city, in rupees."""
    return {"city": city, "price_inr": RATES.get(city, 200) + 10 * round(weight_kg)}


@server.tool()
def book_courier(order: str, city: str, ctx: Context) -> dict[str, Any]:
    """Book a courier pickup for an order."""
    key = str((ctx.request_context.meta or {}).get("io.underway/idempotency-key", ""))
    made = {"key": key, "order": order, "city": city, "awb": f"AWB-{len(bookings()) + 101}"}
    with LEDGER.open("a") as f:
        f.write(json.dumps(made) + "\n")
    return made


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def find_booking(key: str) -> dict[str, Any]:
    """The booking made under an idempotency key, if any."""
    found = [b for b in bookings() if b["key"] == key]
    return {"booked": bool(found), "booking": found[0] if found else None}


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
