"""The warehouse: an MCP server (official SDK) run over stdio, inside the sandbox.

    python warehouse.py LEDGER_DIR

``stock`` reads the shelf (read-only, a closed world). ``reserve`` puts stock aside: it
says it is idempotent, and it is: a reservation is kept per idempotency key (the
``io.underway/idempotency-key`` of the call's ``_meta``), in ``LEDGER_DIR/reservations``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

LEDGER = Path(sys.argv[1]) / "reservations"
SHELF = {"TEA-1": 40, "COFFEE-2": 3}
server = MCPServer("warehouse")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def stock(sku: str) -> dict[str, Any]:
    """How many units of a SKU are on the shelf."""
    return {"sku": sku, "on_hand": SHELF.get(sku, 0)}


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, open_world_hint=False))
def reserve(order: str, sku: str, qty: int, ctx: Context) -> dict[str, Any]:
    """Put units of a SKU aside for an order (once per idempotency key)."""
    key = str((ctx.request_context.meta or {}).get("io.underway/idempotency-key", ""))
    done = [json.loads(line) for line in LEDGER.read_text().splitlines()] \
        if LEDGER.exists() else []
    for r in done:
        if r["key"] == key:
            return r
    if SHELF.get(sku, 0) < qty:
        raise ValueError(f"only {SHELF.get(sku, 0)} of {sku} on hand")
    made = {"key": key, "order": order, "sku": sku, "qty": qty,
            "reservation": f"R-{len(done) + 1}"}
    with LEDGER.open("a") as f:
        f.write(json.dumps(made) + "\n")
    return made


if __name__ == "__main__":
    server.run("stdio")
