"""An MCP server for the tests, made with the official SDK: run it over stdio (inside the
sandbox) or Streamable HTTP.

    python server.py stdio LEDGER_DIR
    python server.py http LEDGER_DIR PORT

Every effect is appended to ``LEDGER_DIR/effects`` (one JSON line per tool run, with the
idempotency key the call carried), so a test counts from outside what ran. ``hold`` and
``hold_put`` write ``LEDGER_DIR/holding-LABEL`` and wait until ``LEDGER_DIR/release-LABEL``
exists: a crash test kills the worker while a call is held.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

LEDGER = Path(sys.argv[2])
server = MCPServer("ledger")


def record(ctx: Context, tool: str, **fields: Any) -> str:
    """Append one effect to the ledger; returns the call's idempotency key."""
    meta = ctx.request_context.meta or {}
    key = str(meta.get("io.underway/idempotency-key", ""))
    with (LEDGER / "effects").open("a") as f:
        f.write(json.dumps({"tool": tool, "key": key, **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def seen(key: str, tool: str) -> bool:
    path = LEDGER / "effects"
    if not key or not path.exists():
        return False
    return any(json.loads(line) == {**json.loads(line), "tool": tool, "key": key}
               for line in path.read_text().splitlines())


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def lookup(item: str) -> dict[str, Any]:
    """Look an item up in the ledger's price list."""
    return {"item": item, "price": len(item) * 10}


@server.tool()
def charge(account: str, amount: int, ctx: Context) -> str:
    """Charge an account (no annotations: mutating, irreversible, untrusted output)."""
    record(ctx, "charge", account=account, amount=amount)
    return f"charged {amount} to {account}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, open_world_hint=False))
def put(name: str, value: str, ctx: Context) -> str:
    """Store a value under a name; a repeat of the same key changes nothing."""
    meta = ctx.request_context.meta or {}
    if not seen(str(meta.get("io.underway/idempotency-key", "")), "put"):
        record(ctx, "put", name=name, value=value)
    return f"{name}={value}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fetch(url: str) -> str:
    """Fetch a URL (through the sandbox's proxy, when there is one)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return f"{resp.status} {resp.read().decode()}"
    except Exception as exc:
        raise ToolError(f"fetch failed: {exc}") from None


def held(label: str) -> None:
    """Say the call is here (``holding-LABEL``), then wait for ``release-LABEL``."""
    (LEDGER / f"holding-{label}").write_text(label)
    while not (LEDGER / f"release-{label}").exists():
        time.sleep(0.01)


@server.tool()
def hold(label: str, ctx: Context) -> str:
    """A mutating effect (no annotations) that waits for its release before it answers."""
    record(ctx, "hold", label=label)
    held(label)
    return f"held {label}"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def hold_put(label: str, ctx: Context) -> str:
    """An idempotent effect that waits for its release the first time; a repeat of the
    same key answers at once and changes nothing."""
    meta = ctx.request_context.meta or {}
    if seen(str(meta.get("io.underway/idempotency-key", "")), "hold_put"):
        return f"stored {label} (again)"
    record(ctx, "hold_put", label=label)
    held(label)
    return f"stored {label}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(label: str, ctx: Context) -> str:
    """A read-only look that waits for its release; each run of it is logged."""
    record(ctx, "peek", label=label)
    held(label)
    return f"peeked {label}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def reshape(ctx: Context) -> str:
    """Retire `charge` and add `ping`, then announce the changed tool list."""
    server.remove_tool("charge")
    server.add_tool(ping, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.notify_tools_changed()
    # A 2025 connection hears of it so; a 2026 one through its subscription only.
    with contextlib.suppress(Exception):
        await ctx.request_context.session.send_tool_list_changed()
    return "reshaped"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def quit() -> str:
    """End the server just after this answer is sent (as a crashed server would)."""
    threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0)), daemon=True).start()
    return "bye"


def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    # The stdio server (the sandbox's user) and the HTTP one (the test's) share the ledger.
    os.umask(0)
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
